//! `--filter EXPR`: comparisons of argument operands (see `args`) with
//! integer literals, joined by `&&` and `||`, with parentheses. Parsed once
//! from the command line ([`Filter::parse`]), turned into an OR of AND
//! groups, and resolved per traced function ([`Filter::resolve`]) into the
//! terms the BPF entry program evaluates before it opens a frame: a call
//! the filter rejects is counted and never timed.

use anyhow::{anyhow, bail, Result};

use super::args::{ArgRef, FuncArgs, Operand, Source};

/// Terms one function's filter may have after expansion (TACHY_MAX_TERMS).
pub const MAX_TERMS: usize = 16;
/// Operand kinds of a term (TACHY_OPND_*).
pub const OPND_REG: u8 = 0;
pub const OPND_STACK: u8 = 1;
pub const OPND_TID: u8 = 2;
pub const OPND_PID: u8 = 3;
pub const OPND_RET: u8 = 4;
/// Term flags (TACHY_TERM_*): compare signed; the last of its AND group.
pub const TERM_SIGNED: u8 = 0x1;
pub const TERM_LAST: u8 = 0x2;

/// One term as the BPF side reads it (`struct tachy_term`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Encoded {
    pub value: u64,
    pub off: i32,
    pub kind: u8,
    pub reg: u8,
    pub cmp: u8,
    pub size: u8,
    pub flags: u8,
}

/// A comparison operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Cmp {
    pub fn symbol(self) -> &'static str {
        match self {
            Cmp::Eq => "==",
            Cmp::Ne => "!=",
            Cmp::Lt => "<",
            Cmp::Le => "<=",
            Cmp::Gt => ">",
            Cmp::Ge => ">=",
        }
    }

    /// The operator with its sides swapped (`3 < x` is `x > 3`).
    fn flipped(self) -> Cmp {
        match self {
            Cmp::Lt => Cmp::Gt,
            Cmp::Le => Cmp::Ge,
            Cmp::Gt => Cmp::Lt,
            Cmp::Ge => Cmp::Le,
            c => c,
        }
    }

    /// Encoding shared with the BPF side (TACHY_CMP_*).
    pub fn code(self) -> u8 {
        self as u8
    }
}

/// One comparison as written: an operand, an operator and a literal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Comparison {
    pub arg: ArgRef,
    pub op: Cmp,
    pub value: i128,
}

impl std::fmt::Display for Comparison {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} {}", self.arg, self.op.symbol(), self.value)
    }
}

/// A parsed `--filter`: an OR of AND groups of comparisons.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Filter {
    pub text: String,
    pub groups: Vec<Vec<Comparison>>,
}

/// Where and how the BPF entry program reads an operand (a term without
/// its comparison): what `--by` keys of arguments are encoded as too.
pub fn encode_operand(op: &Operand) -> Encoded {
    let (kind, reg, off) = match op.source {
        Source::Reg(r) => (OPND_REG, r, 0),
        Source::Stack(o) => (OPND_STACK, 0, o),
        Source::Tid => (OPND_TID, 0, 0),
        Source::Pid => (OPND_PID, 0, 0),
        Source::Ret => (OPND_RET, 0, 0),
    };
    Encoded {
        value: 0,
        off,
        kind,
        reg,
        cmp: 0,
        size: op.size,
        flags: if op.signed { TERM_SIGNED } else { 0 },
    }
}

/// One comparison resolved for a function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Term {
    pub operand: Operand,
    pub op: Cmp,
    /// The literal's bits, as the operand's width and sign read it.
    pub value: u64,
}

/// A filter resolved for one function: OR of AND groups of terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub groups: Vec<Vec<Term>>,
    /// Notes to print once (what `argN` means on a clone).
    pub notes: Vec<String>,
}

impl Resolved {
    /// The terms in order, each AND group's last one flagged, as the BPF
    /// entry program evaluates them.
    pub fn encode(&self) -> Vec<Encoded> {
        let mut out = Vec::new();
        for g in &self.groups {
            for (i, t) in g.iter().enumerate() {
                let mut e = encode_operand(&t.operand);
                e.value = t.value;
                e.cmp = t.op.code();
                if i + 1 == g.len() {
                    e.flags |= TERM_LAST;
                }
                out.push(e);
            }
        }
        out
    }

    /// The registers its terms read (bit per x86 number).
    pub fn registers(&self) -> u16 {
        self.groups
            .iter()
            .flatten()
            .filter_map(|t| match t.operand.source {
                Source::Reg(r) => Some(1u16 << (r & 15)),
                _ => None,
            })
            .fold(0, |a, b| a | b)
    }

    /// As `--dry-run` shows it.
    pub fn describe(&self) -> String {
        self.groups
            .iter()
            .map(|g| {
                g.iter()
                    .map(|t| {
                        let v = if t.operand.signed {
                            (t.value as i64).to_string()
                        } else {
                            t.value.to_string()
                        };
                        format!("{} {} {v}", t.operand.what, t.op.symbol())
                    })
                    .collect::<Vec<_>>()
                    .join(" && ")
            })
            .collect::<Vec<_>>()
            .join(" || ")
    }
}

#[derive(Clone, Debug)]
enum Expr {
    Cmp(Comparison),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Word(String),
    Num(i128),
    Op(Cmp),
    And,
    Or,
    Open,
    Close,
}

struct Parser<'a> {
    text: &'a str,
    toks: Vec<(usize, Tok)>,
    at: usize,
}

impl Filter {
    /// Parses `EXPR`. Errors name the column (from 1) where parsing failed.
    pub fn parse(text: &str) -> Result<Filter> {
        let toks = lex(text)?;
        let mut p = Parser { text, toks, at: 0 };
        let e = p.or()?;
        if let Some((pos, _)) = p.toks.get(p.at) {
            return Err(p.error(*pos, "expected && or || or the end"));
        }
        let groups = dnf(&e);
        let terms: usize = groups.iter().map(Vec::len).sum();
        if terms > MAX_TERMS {
            bail!(
                "--filter {text:?} has {terms} comparisons once its parentheses are expanded; at most {MAX_TERMS} are evaluated per call"
            );
        }
        Ok(Filter {
            text: text.to_string(),
            groups,
        })
    }

    /// Every operand the filter reads, once each.
    pub fn operands(&self) -> Vec<&ArgRef> {
        let mut out: Vec<&ArgRef> = Vec::new();
        for c in self.groups.iter().flatten() {
            if !out.contains(&&c.arg) {
                out.push(&c.arg);
            }
        }
        out
    }

    /// Whether some comparison reads the return value (decided at the
    /// call's exit).
    pub fn reads_ret(&self) -> bool {
        self.operands().contains(&&ArgRef::Ret)
    }

    /// Whether every operand is the return value.
    pub fn reads_only_ret(&self) -> bool {
        self.operands().iter().all(|a| **a == ArgRef::Ret)
    }

    /// The filter for one function: every operand resolved where that
    /// function has it, every literal checked against the operand's type.
    pub fn resolve(&self, f: &FuncArgs) -> Result<Resolved> {
        let mut notes = Vec::new();
        let mut groups = Vec::new();
        for g in &self.groups {
            let mut terms = Vec::new();
            for c in g {
                let operand = f.resolve(&c.arg)?;
                if let Some(n) = &operand.note {
                    if !notes.contains(n) {
                        notes.push(n.clone());
                    }
                }
                if !operand.holds(c.value) {
                    bail!(
                        "--filter: {} cannot be {} ({} is {}{} bits)",
                        c.arg,
                        c.value,
                        operand.what,
                        if operand.signed {
                            "signed, "
                        } else {
                            "unsigned, "
                        },
                        u32::from(operand.size) * 8
                    );
                }
                terms.push(Term {
                    value: c.value as u64,
                    operand,
                    op: c.op,
                });
            }
            groups.push(terms);
        }
        Ok(Resolved { groups, notes })
    }
}

fn lex(text: &str) -> Result<Vec<(usize, Tok)>> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let err =
        |pos: usize, what: &str| anyhow!("invalid --filter {text:?}: column {}: {what}", pos + 1);
    while i < b.len() {
        let c = b[i];
        let two = b.get(i..i + 2).unwrap_or(&[]);
        let start = i;
        let tok = match (c, two) {
            (b' ' | b'\t' | b'\n', _) => {
                i += 1;
                continue;
            }
            (_, b"&&") => Tok::And,
            (_, b"||") => Tok::Or,
            (_, b"==") => Tok::Op(Cmp::Eq),
            (_, b"!=") => Tok::Op(Cmp::Ne),
            (_, b"<=") => Tok::Op(Cmp::Le),
            (_, b">=") => Tok::Op(Cmp::Ge),
            (b'<', _) => Tok::Op(Cmp::Lt),
            (b'>', _) => Tok::Op(Cmp::Gt),
            (b'(', _) => Tok::Open,
            (b')', _) => Tok::Close,
            (b'=', _) => return Err(err(i, "'=' is not a comparison: use ==")),
            (b'&', _) => return Err(err(i, "'&' alone: use && to join comparisons")),
            (b'|', _) => return Err(err(i, "'|' alone: use || to join comparisons")),
            (b'-' | b'0'..=b'9', _) => {
                let neg = c == b'-';
                let mut j = if neg { i + 1 } else { i };
                while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_') {
                    j += 1;
                }
                let digits = &text[if neg { i + 1 } else { i }..j];
                let v = parse_int(digits).ok_or_else(|| {
                    err(
                        start,
                        &format!(
                            "{:?} is not an integer (decimal, or hex with 0x)",
                            &text[i..j]
                        ),
                    )
                })?;
                i = j;
                out.push((start, Tok::Num(if neg { -v } else { v })));
                continue;
            }
            (c, _) if c.is_ascii_alphabetic() || c == b'_' => {
                let mut j = i;
                while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_') {
                    j += 1;
                }
                let w = text[i..j].to_string();
                i = j;
                out.push((start, Tok::Word(w)));
                continue;
            }
            _ => {
                let ch = text[i..].chars().next().unwrap_or('?');
                return Err(err(i, &format!("unexpected {ch:?}")));
            }
        };
        i += match tok {
            Tok::Op(Cmp::Lt | Cmp::Gt) | Tok::Open | Tok::Close => 1,
            _ => 2,
        };
        out.push((start, tok));
    }
    Ok(out)
}

/// A decimal or 0x-hex integer of at most 64 bits.
fn parse_int(s: &str) -> Option<i128> {
    let v = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok()?,
        None => s.parse::<u64>().ok()?,
    };
    Some(v as i128)
}

impl Parser<'_> {
    fn error(&self, pos: usize, what: &str) -> anyhow::Error {
        anyhow!(
            "invalid --filter {:?}: column {}: {what}",
            self.text,
            pos + 1
        )
    }

    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.at).map(|(_, t)| t)
    }

    fn pos(&self) -> usize {
        self.toks.get(self.at).map_or(self.text.len(), |(p, _)| *p)
    }

    fn or(&mut self) -> Result<Expr> {
        let mut e = self.and()?;
        while self.peek() == Some(&Tok::Or) {
            self.at += 1;
            e = Expr::Or(Box::new(e), Box::new(self.and()?));
        }
        Ok(e)
    }

    fn and(&mut self) -> Result<Expr> {
        let mut e = self.primary()?;
        while self.peek() == Some(&Tok::And) {
            self.at += 1;
            e = Expr::And(Box::new(e), Box::new(self.primary()?));
        }
        Ok(e)
    }

    fn primary(&mut self) -> Result<Expr> {
        if self.peek() == Some(&Tok::Open) {
            let open = self.pos();
            self.at += 1;
            let e = self.or()?;
            if self.peek() != Some(&Tok::Close) {
                let pos = self.pos();
                return Err(self.error(
                    pos,
                    &format!("expected ')' to close the '(' of column {}", open + 1),
                ));
            }
            self.at += 1;
            return Ok(e);
        }
        let (lhs_pos, lhs) = self.side()?;
        let op_pos = self.pos();
        let Some(Tok::Op(op)) = self.peek().cloned() else {
            return Err(self.error(op_pos, "expected one of == != < <= > >="));
        };
        self.at += 1;
        let (rhs_pos, rhs) = self.side()?;
        let cmp = match (lhs, rhs) {
            (Side::Arg(arg), Side::Num(value)) => Comparison { arg, op, value },
            (Side::Num(value), Side::Arg(arg)) => Comparison {
                arg,
                op: op.flipped(),
                value,
            },
            (Side::Arg(_), Side::Arg(_)) => {
                return Err(self.error(
                    rhs_pos,
                    "expected an integer: an argument is compared with a number",
                ))
            }
            (Side::Num(_), Side::Num(_)) => {
                return Err(self.error(
                    lhs_pos,
                    "expected an argument (argN, tid, pid or a parameter name)",
                ))
            }
        };
        Ok(Expr::Cmp(cmp))
    }

    fn side(&mut self) -> Result<(usize, Side)> {
        let pos = self.pos();
        let side = match self.peek().cloned() {
            Some(Tok::Num(v)) => Side::Num(v),
            Some(Tok::Word(w)) => {
                Side::Arg(ArgRef::parse(&w).map_err(|e| self.error(pos, &format!("{e:#}")))?)
            }
            Some(_) => {
                return Err(self.error(
                    pos,
                    "expected an argument (argN, tid, pid or a parameter name) or an integer",
                ))
            }
            None => {
                return Err(self.error(pos, "unexpected end: expected an argument or an integer"))
            }
        };
        self.at += 1;
        Ok((pos, side))
    }
}

enum Side {
    Arg(ArgRef),
    Num(i128),
}

/// OR of ANDs: `a && (b || c)` is `a && b || a && c`.
fn dnf(e: &Expr) -> Vec<Vec<Comparison>> {
    match e {
        Expr::Cmp(c) => vec![vec![c.clone()]],
        Expr::Or(a, b) => {
            let mut v = dnf(a);
            v.extend(dnf(b));
            v
        }
        Expr::And(a, b) => {
            let (l, r) = (dnf(a), dnf(b));
            let mut out = Vec::with_capacity(l.len() * r.len());
            for x in &l {
                for y in &r {
                    let mut g = x.clone();
                    g.extend(y.iter().cloned());
                    out.push(g);
                    // Bounded: a filter is refused past MAX_TERMS anyway.
                    if out.len() > MAX_TERMS {
                        return out;
                    }
                }
            }
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(f: &Filter) -> String {
        f.groups
            .iter()
            .map(|g| {
                g.iter()
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join(" && ")
            })
            .collect::<Vec<_>>()
            .join(" || ")
    }

    #[test]
    fn parses_comparisons_joined_by_and_or() {
        let f = Filter::parse("arg1 == 3").unwrap();
        assert_eq!(shown(&f), "arg1 == 3");
        let f = Filter::parse("arg0 < 5 && key >= 0x10 || tid != 42").unwrap();
        assert_eq!(shown(&f), "arg0 < 5 && key >= 16 || tid != 42");
        let f = Filter::parse("(arg1==1||arg1==-2)&&pid>1").unwrap();
        assert_eq!(shown(&f), "arg1 == 1 && pid > 1 || arg1 == -2 && pid > 1");
        // A literal on the left: the operator turns round.
        let f = Filter::parse("10 <= arg2").unwrap();
        assert_eq!(shown(&f), "arg2 >= 10");
        let f = Filter::parse("arg0 == 0xffffffffffffffff").unwrap();
        assert_eq!(f.groups[0][0].value, u64::MAX as i128);
        assert_eq!(f.operands(), [&ArgRef::Index(0)]);
    }

    #[test]
    fn errors_name_the_column() {
        let err = |s: &str| Filter::parse(s).unwrap_err().to_string();
        assert_eq!(
            err("arg1 = 3"),
            "invalid --filter \"arg1 = 3\": column 6: '=' is not a comparison: use =="
        );
        assert_eq!(
            err("arg1 == "),
            "invalid --filter \"arg1 == \": column 9: unexpected end: expected an argument or an integer"
        );
        assert_eq!(
            err("arg1 3"),
            "invalid --filter \"arg1 3\": column 6: expected one of == != < <= > >="
        );
        assert_eq!(
            err("(arg1 == 3"),
            "invalid --filter \"(arg1 == 3\": column 11: expected ')' to close the '(' of column 1"
        );
        assert_eq!(
            err("arg1 == 3 arg2 == 4"),
            "invalid --filter \"arg1 == 3 arg2 == 4\": column 11: expected && or || or the end"
        );
        assert_eq!(
            err("arg1 == 12ab"),
            "invalid --filter \"arg1 == 12ab\": column 9: \"12ab\" is not an integer (decimal, or hex with 0x)"
        );
        assert_eq!(
            err("arg9 == 1"),
            "invalid --filter \"arg9 == 1\": column 1: arg9: only arg0 to arg5 (the six integer argument registers) can be read; name a later parameter by its DWARF name"
        );
        assert!(err("arg1 == arg2").contains("column 9: expected an integer"));
        assert!(err("1 == 2").contains("column 1: expected an argument"));
        assert!(err("arg1 & 1").contains("column 6"));
        assert!(err("").contains("column 1: unexpected end"));
        assert!(err("arg0 == 99999999999999999999").contains("not an integer"));
    }

    #[test]
    fn expansion_is_bounded() {
        let many = (0..5)
            .map(|i| format!("(arg0 == {i} || arg1 == {i})"))
            .collect::<Vec<_>>()
            .join(" && ");
        let e = Filter::parse(&many).unwrap_err().to_string();
        assert!(e.contains("at most 16 are evaluated per call"), "{e}");
        let ok = (0..16)
            .map(|i| format!("arg0 == {i}"))
            .collect::<Vec<_>>()
            .join(" || ");
        assert_eq!(Filter::parse(&ok).unwrap().groups.len(), 16);
    }

    #[test]
    fn resolves_per_function_and_checks_literals() {
        let f = Filter::parse("arg1 == -1 || tid == 7").unwrap();
        let r = f.resolve(&FuncArgs::from_params("f", "", None)).unwrap();
        assert_eq!(r.groups[0][0].operand.source, Source::Reg(6));
        assert_eq!(r.groups[0][0].value, u64::MAX);
        assert_eq!(r.groups[1][0].operand.source, Source::Tid);
        assert_eq!(r.describe(), "arg1 (rsi) == -1 || tid == 7");
        let bad = Filter::parse("tid == -1").unwrap();
        let e = bad
            .resolve(&FuncArgs::from_params("f", "", None))
            .unwrap_err()
            .to_string();
        assert_eq!(e, "--filter: tid cannot be -1 (tid is unsigned, 32 bits)");
    }

    #[test]
    fn encodes_groups_with_their_last_term_flagged() {
        let f = Filter::parse("arg1 < -2 && pid >= 3 || tid == 9").unwrap();
        let r = f.resolve(&FuncArgs::from_params("f", "", None)).unwrap();
        let e = r.encode();
        assert_eq!(
            e,
            [
                Encoded {
                    value: -2i64 as u64,
                    kind: OPND_REG,
                    reg: 6,
                    cmp: 2,
                    size: 8,
                    flags: TERM_SIGNED,
                    off: 0
                },
                Encoded {
                    value: 3,
                    kind: OPND_PID,
                    cmp: 5,
                    size: 4,
                    flags: TERM_LAST,
                    ..Encoded::default()
                },
                Encoded {
                    value: 9,
                    kind: OPND_TID,
                    cmp: 0,
                    size: 4,
                    flags: TERM_LAST,
                    ..Encoded::default()
                },
            ]
        );
    }
}
