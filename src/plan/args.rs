//! Argument operands: what `--filter` (and any other feature that reads a
//! traced call's arguments at its entry) means by `argN`, a DWARF parameter
//! name, `tid` or `pid`, resolved per function to a place the BPF entry
//! program can read.
//!
//! The API, in the order it is used:
//!
//! 1. [`ArgRef::parse`] turns the text (`arg1`, `key`, `tid`, `pid`) into an
//!    [`ArgRef`]; nothing is looked up yet.
//! 2. [`FuncArgs::for_functions`] reads, in one DWARF pass per object, what
//!    each function's own subprogram DIE says about its parameters (a
//!    compiler clone has its own); [`FuncArgs::for_syscall`] does the same
//!    for a system call (registers of the syscall ABI, named and typed as
//!    the kernel's tracing describes them, [`abi::syscall_params`]).
//! 3. [`FuncArgs::resolve`] gives an [`Operand`]: a register, a stack slot
//!    at the entry SP, the thread id or the process id, with the width and
//!    signedness to compare it with, a description for messages, and a
//!    note to print where the meaning deserves one (`argN` of a clone). It
//!    fails with one line saying why (no DWARF, no such parameter and the
//!    names there are, a float or struct by value, optimized out of a
//!    clone, a location that is not a register or stack slot at the entry).
//!
//! `argN` counts from 0 as the SysV x86-64 ABI passes integer arguments:
//! arg0..arg5 are rdi, rsi, rdx, rcx, r8, r9, so `this` is arg0 of a C++
//! method. Of a system call they are rdi, rsi, rdx, r10, r8, r9. A clone
//! (`.isra`, `.constprop`, `.part`) is called with its own convention:
//! there `argN` is still the Nth register, and the note says so. Names are
//! read where the clone's DWARF says they live at its entry. Pure but for
//! the system calls' argument names, read from tracefs.

use std::collections::HashMap;

use anyhow::{bail, Result};

use super::abi::{self, syscall_params, ABI_REGS, SYSCALL_REGS};
use crate::symbols::elf::params::{
    self, EntryLoc, FuncParams, Param, ParamType, Returns, REG_NAMES,
};
use crate::symbols::{ElfObject, Function};

/// An operand as the user wrote it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ArgRef {
    /// `argN`: the Nth integer argument register (from 0).
    Index(u8),
    /// A parameter's name, from DWARF.
    Name(String),
    /// The thread id (as `-t` and `gettid()`).
    Tid,
    /// The process id (the thread group id).
    Pid,
    /// The return value (`ret` or `retval`), read at the call's exit.
    Ret,
}

impl ArgRef {
    /// `argN` (N from 0 to 5), `tid`, `pid`, `ret` (`retval`), or a
    /// parameter name (a C identifier).
    pub fn parse(s: &str) -> Result<ArgRef> {
        match s {
            "tid" => return Ok(ArgRef::Tid),
            "pid" => return Ok(ArgRef::Pid),
            "ret" | "retval" => return Ok(ArgRef::Ret),
            _ => {}
        }
        if let Some(n) = s.strip_prefix("arg") {
            if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) {
                return match n.parse::<u8>() {
                    Ok(i) if (i as usize) < ABI_REGS.len() => Ok(ArgRef::Index(i)),
                    _ => bail!(
                        "{s}: only arg0 to arg5 (the six integer argument registers) can be read; name a later parameter by its DWARF name"
                    ),
                };
            }
        }
        let mut b = s.bytes();
        let ok = b
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
            && b.all(|c| c.is_ascii_alphanumeric() || c == b'_');
        if !ok {
            bail!("{s:?} is not an argument: expected argN, tid, pid or a parameter name");
        }
        Ok(ArgRef::Name(s.to_string()))
    }
}

impl std::fmt::Display for ArgRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ArgRef::Index(i) => write!(f, "arg{i}"),
            ArgRef::Name(n) => f.write_str(n),
            ArgRef::Tid => f.write_str("tid"),
            ArgRef::Pid => f.write_str("pid"),
            ArgRef::Ret => f.write_str("ret"),
        }
    }
}

/// Where an operand's value is read at the entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// A register (x86 encoding number: 0 rax, 1 rcx, 2 rdx, 3 rbx, 4 rsp,
    /// 5 rbp, 6 rsi, 7 rdi, 8-15 r8-r15).
    Reg(u8),
    /// 8 bytes of the traced thread's stack at the entry SP (the address of
    /// the return address) plus this offset.
    Stack(i32),
    /// The calling thread's id.
    Tid,
    /// The calling thread's process id.
    Pid,
    /// The return value, in the return register at the call's exit.
    Ret,
}

/// How a function's return value reads (from its DWARF return type).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetShape {
    /// Bytes of the return register that are the value (1, 2, 4 or 8).
    pub size: u8,
    pub signed: bool,
    pub kind: RetKind,
    /// The type, for messages and `--dry-run` (`int`, `enum state`).
    pub type_name: String,
}

/// What kind of value a function returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RetKind {
    /// An integer (or a character).
    Int,
    /// An address: shown in hex.
    Pointer,
    /// `bool`: `true` or `false`.
    Bool,
    /// An enum: shown by its enumerators' names (value, name).
    Enum(Vec<(i64, String)>),
    /// A system call's result: a negative value is an errno, named.
    Errno,
    /// Nothing says: the whole register, as a signed number.
    Whole,
}

impl RetShape {
    fn whole(type_name: &str) -> RetShape {
        RetShape {
            size: 8,
            signed: true,
            kind: RetKind::Whole,
            type_name: type_name.into(),
        }
    }
}

/// An operand resolved for one function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operand {
    pub source: Source,
    /// Bytes of the value that count (1, 2, 4 or 8): the ABI leaves the
    /// bits of a register above a narrower argument undefined.
    pub size: u8,
    /// Compare as signed (sign-extended from `size`).
    pub signed: bool,
    /// DWARF says it is a pointer or reference (shown in hex).
    pub pointer: bool,
    /// For messages and `--dry-run`: `key (rsi, int)`, `arg0 (rdi)`.
    pub what: String,
    /// Something the user should know about this operand on this function
    /// (printed once on stderr), e.g. what `argN` of a clone is.
    pub note: Option<String>,
}

impl Operand {
    fn plain(source: Source, what: String) -> Operand {
        Operand {
            source,
            size: if matches!(source, Source::Tid | Source::Pid) {
                4
            } else {
                8
            },
            signed: !matches!(source, Source::Tid | Source::Pid),
            pointer: false,
            what,
            note: None,
        }
    }

    /// Whether `v` is a value this operand can hold (as its type reads).
    pub fn holds(&self, v: i128) -> bool {
        let bits = u32::from(self.size) * 8;
        if self.signed {
            // A full 64-bit register also compares with 64-bit unsigned
            // literals (addresses), by their bits.
            let lo = -(1i128 << (bits - 1));
            let hi = if bits == 64 {
                (1i128 << 64) - 1
            } else {
                (1i128 << (bits - 1)) - 1
            };
            (lo..=hi).contains(&v)
        } else {
            (0..(1i128 << bits)).contains(&v)
        }
    }
}

/// How a function receives its arguments.
#[derive(Clone, Debug)]
enum Convention {
    /// The SysV ABI (a symbol anyone may call).
    Abi,
    /// A compiler clone or a function DWARF marks as not following the
    /// ABI: what it is, for messages (`clone .isra.0`).
    Own(String),
    /// A system call.
    Syscall,
    /// Go's register ABI: not read.
    Go,
    /// AArch64 code that follows AAPCS64: integer arguments in x0-x7.
    Arm64,
}

/// What one traced function (or system call) knows of its arguments.
#[derive(Clone, Debug)]
pub struct FuncArgs {
    /// As users know it (demangled, with any clone suffix).
    pub name: String,
    convention: Convention,
    /// Its own DWARF parameters; None when the object has no DWARF or no
    /// subprogram DIE starts at the function.
    params: Option<FuncParams>,
    /// Registers (bit per x86 number, or xN) that instructions before the
    /// entry probe may write: their values there are no longer the
    /// arguments.
    clobbered: u16,
    /// Its registers are arm64's (x0...), not x86-64's.
    arm64: bool,
}

impl FuncArgs {
    /// The argument knowledge of `funcs`, all of `obj`, in one DWARF pass.
    /// `entries[i]` is where the entry probe of `funcs[i]` stands (its
    /// address when the probe is on the first instruction).
    pub fn for_functions(obj: &ElfObject, funcs: &[(&Function, u64)]) -> Vec<FuncArgs> {
        let addrs: Vec<u64> = funcs.iter().map(|(f, _)| f.addr).collect();
        let mut found: HashMap<u64, FuncParams> =
            params::params_at(obj, &addrs).unwrap_or_default();
        funcs
            .iter()
            .map(|(f, entry)| {
                let clobbered = if *entry > f.addr {
                    obj.code(f.addr, entry - f.addr).map_or(u16::MAX, |c| {
                        crate::disasm::written_registers(obj.arch, c, f.addr)
                    })
                } else {
                    0
                };
                let arm64 = obj.arch != crate::disasm::Arch::X86_64;
                let go = f.names.lang == crate::symbols::demangle::Lang::Go;
                // Go's register ABI on arm64 puts integer arguments in
                // x0-x15 in order: argN reads them; its DWARF is not read.
                let params = found.remove(&f.addr).filter(|_| !(arm64 && go));
                let convention = if arm64 && go {
                    Convention::Arm64
                } else if go {
                    Convention::Go
                } else if !f.names.suffix.is_empty() {
                    Convention::Own(format!("clone {}", f.names.suffix))
                } else if params.as_ref().is_some_and(|p| p.nocall) {
                    Convention::Own(
                        "a function the compiler gave its own calling convention".into(),
                    )
                } else if arm64 {
                    Convention::Arm64
                } else {
                    Convention::Abi
                };
                FuncArgs {
                    name: f.display_name(),
                    convention,
                    params,
                    clobbered,
                    arm64,
                }
            })
            .collect()
    }

    /// A system call `name` (`syscall:close`): arguments in the syscall
    /// ABI's registers, named as the running kernel's tracing names them
    /// (none where it does not).
    pub fn for_syscall(name: &str) -> FuncArgs {
        let bare = name.strip_prefix("syscall:").unwrap_or(name);
        let args = crate::kernel::syscalls::arguments(bare);
        FuncArgs::for_syscall_with(name, args.as_deref())
    }

    /// A system call `name` whose arguments are `args`, (C type, name) in
    /// order (None: unnamed).
    pub fn for_syscall_with(name: &str, args: Option<&[(String, String)]>) -> FuncArgs {
        FuncArgs {
            name: name.to_string(),
            convention: Convention::Syscall,
            params: args.map(syscall_params),
            clobbered: 0,
            arm64: cfg!(target_arch = "aarch64"),
        }
    }

    /// A function known by what its DWARF says (for tests and tools that
    /// have no object at hand).
    pub fn from_params(name: &str, clone_suffix: &str, params: Option<FuncParams>) -> FuncArgs {
        FuncArgs {
            name: name.to_string(),
            convention: if clone_suffix.is_empty() {
                Convention::Abi
            } else {
                Convention::Own(format!("clone {clone_suffix}"))
            },
            params,
            clobbered: 0,
            arm64: false,
        }
    }

    /// Where `arg` is at this function's entry, or one line saying why it
    /// cannot be read there.
    pub fn resolve(&self, arg: &ArgRef) -> Result<Operand> {
        let name = &self.name;
        match (arg, &self.convention) {
            (ArgRef::Tid, _) => return Ok(Operand::plain(Source::Tid, "tid".into())),
            (ArgRef::Pid, _) => return Ok(Operand::plain(Source::Pid, "pid".into())),
            (ArgRef::Ret, _) => {
                return self
                    .ret_operand()
                    .map_err(|e| anyhow::anyhow!("{arg}: {e:#}"))
            }
            (_, Convention::Go) => {
                bail!("{name}: arguments of Go functions cannot be read yet (Go passes them in its own registers)")
            }
            (ArgRef::Name(n), Convention::Arm64) if self.params.is_none() => {
                bail!("{n}: arguments of this aarch64 code are named by position only: arg0 to arg5 ({name})")
            }
            _ => {}
        }
        let op = match arg {
            ArgRef::Index(i) => self.index(*i)?,
            ArgRef::Name(n) => self.named(n)?,
            ArgRef::Tid | ArgRef::Pid | ArgRef::Ret => unreachable!("handled above"),
        };
        if let Source::Reg(r) = op.source {
            if self.clobbered & (1 << r) != 0 {
                bail!(
                    "{name}: the entry probe stands after an instruction that may overwrite {} ({arg}), so its value there is not the argument",
                    self.reg_name(r)
                );
            }
        }
        Ok(op)
    }

    /// The return value as an operand read at the exit, or one line saying
    /// why it cannot be read (`f returns void`).
    pub fn ret_operand(&self) -> Result<Operand> {
        let r = self.returns()?;
        Ok(Operand {
            source: Source::Ret,
            size: r.size,
            signed: r.signed,
            pointer: r.kind == RetKind::Pointer,
            what: format!("ret ({})", r.type_name),
            note: self.returns_note(),
        })
    }

    /// How this function's return value reads, or one line saying why it
    /// cannot be read (`f returns void`).
    pub fn returns(&self) -> Result<RetShape> {
        let name = &self.name;
        match self.convention {
            Convention::Syscall => {
                return Ok(RetShape {
                    kind: RetKind::Errno,
                    ..RetShape::whole("long")
                })
            }
            Convention::Go if self.params.is_none() => {
                return Ok(RetShape::whole("Go's first integer result"))
            }
            _ => {}
        }
        let Some(ps) = &self.params else {
            return Ok(RetShape::whole("rax, no DWARF"));
        };
        // Go's results are read from its first integer result register
        // (RAX), as its first result's type reads it.
        if matches!(self.convention, Convention::Go) {
            match &ps.returns {
                Returns::Void => bail!("{name} has no result"),
                Returns::Value(ParamType::Float { name: ty }) => bail!(
                    "{name}'s first result is floating point ({ty}): tachy reads Go's first integer result register"
                ),
                _ => {}
            }
        }
        let int = |size: u8, signed: bool, kind: RetKind, ty: &str| RetShape {
            size,
            signed,
            kind,
            type_name: ty.to_string(),
        };
        Ok(match &ps.returns {
            Returns::Void => bail!("{name} returns void"),
            Returns::Bool { size } => int(*size, false, RetKind::Bool, "bool"),
            Returns::Enum {
                size,
                signed,
                name: ty,
                values,
            } => int(*size, *signed, RetKind::Enum(values.clone()), ty),
            Returns::Value(ParamType::Int { size, signed, name }) => {
                int(*size, *signed, RetKind::Int, name)
            }
            Returns::Value(ParamType::Pointer { name }) => int(8, false, RetKind::Pointer, name),
            Returns::Value(ParamType::Float { name: ty }) => bail!(
                "{name} returns floating point ({ty}): tachy reads integer and pointer return values"
            ),
            Returns::Value(ParamType::Aggregate { name: ty }) => bail!(
                "{name} returns {ty} by value: tachy reads integer and pointer return values"
            ),
            Returns::Value(ParamType::Other { name: ty }) => bail!(
                "{name} returns {ty}: tachy reads integer and pointer return values of up to 8 bytes"
            ),
        })
    }

    /// What to say once of how this function's return value is read,
    /// where no type says it.
    pub fn returns_note(&self) -> Option<String> {
        let name = &self.name;
        match (&self.convention, &self.params) {
            (Convention::Go, None) => Some(format!(
                "{name}: ret is Go's first integer result register, read as a signed 64-bit number"
            )),
            (Convention::Syscall, _) => None,
            (_, None) => Some(format!(
                "{name} has no DWARF: ret is the whole return register, read as a signed 64-bit number"
            )),
            _ => None,
        }
    }

    fn index(&self, i: u8) -> Result<Operand> {
        let name = &self.name;
        let reg = match self.convention {
            Convention::Syscall => abi::syscall_reg(i),
            // AAPCS64 (and a clone's own convention on arm64): argN is xN.
            _ if self.arm64 => abi::aapcs64_reg(i),
            _ => ABI_REGS[i as usize],
        };
        let rn = self.reg_name(reg);
        let mut op = Operand::plain(Source::Reg(reg), format!("arg{i} ({rn})"));
        // The parameter that DWARF (or the ABI) puts in that register
        // gives the width and sign.
        let holder = self.params.as_ref().and_then(|ps| {
            ps.params.iter().enumerate().find(|(k, p)| {
                p.at_entry == EntryLoc::Reg(reg)
                    || (matches!(self.convention, Convention::Abi | Convention::Arm64)
                        && !matches!(p.at_entry, EntryLoc::Reg(_) | EntryLoc::Stack(_))
                        && self.abi_reg(ps, *k) == Some(reg))
            })
        });
        if let Some((_, p)) = holder {
            if let Some((size, signed)) = width(&p.ty) {
                op.size = size;
                op.signed = signed;
            }
            op.pointer = matches!(p.ty, ParamType::Pointer { .. });
            if let Some(pn) = &p.name {
                op.what = format!("arg{i} ({rn}, {pn}: {})", p.ty.name());
            }
        }
        if let Convention::Own(what) = &self.convention {
            let holds = match holder.and_then(|(_, p)| p.name.as_deref()) {
                Some(pn) => format!("its DWARF puts parameter {pn} there"),
                None if self.params.is_some() => "its DWARF puts no parameter there".to_string(),
                None => "no DWARF says which parameter that is".to_string(),
            };
            op.note = Some(format!(
                "{name}: arg{i} is register {rn} of the {what}, which may drop or reorder parameters ({holds})"
            ));
        }
        Ok(op)
    }

    /// Register `r` as this function's code numbers it: `rdi` on x86-64,
    /// `x0` on arm64.
    fn reg_name(&self, r: u8) -> String {
        abi::reg_name(self.arm64, r)
    }

    /// The register this function's ABI passes parameter `k` in.
    fn abi_reg(&self, ps: &FuncParams, k: usize) -> Option<u8> {
        if self.arm64 {
            abi::aapcs64_param_reg(ps, k)
        } else {
            abi::sysv_reg(ps, k)
        }
    }

    fn named(&self, n: &str) -> Result<Operand> {
        let name = &self.name;
        let Some(ps) = &self.params else {
            match self.convention {
                Convention::Syscall => bail!(
                    "{n}: this kernel's tracing does not name the arguments of {name}; use arg0 to arg5"
                ),
                _ => bail!(
                    "{n}: {name} has no DWARF parameter information (built without -g?); name its arguments arg0 to arg5"
                ),
            }
        };
        let Some((k, p)) = ps
            .params
            .iter()
            .enumerate()
            .find(|(_, p)| p.name.as_deref() == Some(n))
        else {
            let names = ps.names();
            if names.is_empty() {
                bail!("{name} has no parameter named {n} (DWARF names none)");
            }
            bail!(
                "{name} has no parameter named {n} (its parameters: {})",
                names.join(", ")
            );
        };
        self.place(n, k, p, ps)
    }

    /// Where parameter `k` (`p`, named `n`) of this function is at its
    /// entry, or why it cannot be read there.
    fn place(&self, n: &str, k: usize, p: &Param, ps: &FuncParams) -> Result<Operand> {
        let name = &self.name;
        let ty = p.ty.name();
        let Some((size, signed)) = width(&p.ty) else {
            match &p.ty {
                ParamType::Float { .. } => bail!(
                    "{n} of {name} is floating point ({ty}): tachy reads integers and pointers"
                ),
                ParamType::Aggregate { .. } => bail!(
                    "{n} of {name} is passed by value as {ty}: tachy reads integers and pointers"
                ),
                _ => bail!(
                    "{n} of {name} is a {ty}: tachy reads integers and pointers of up to 8 bytes"
                ),
            }
        };
        let own = match &self.convention {
            Convention::Own(what) => Some(what.as_str()),
            _ => None,
        };
        let source = match (&p.at_entry, own) {
            (EntryLoc::Reg(r), _) => Source::Reg(*r),
            (EntryLoc::Stack(off), _) => match i32::try_from(*off) {
                Ok(o) if o >= 8 => Source::Stack(o),
                _ => bail!("{n} of {name} is on the stack at an offset tachy does not read ({off})"),
            },
            (EntryLoc::Const(c), Some(what)) => bail!(
                "{n} of {name} is the constant {c} in this {what}: every call passes the same value"
            ),
            (EntryLoc::Absent, Some(what)) => bail!(
                "{n} of {name} was optimized out of this {what}: it has no value at the entry"
            ),
            (EntryLoc::Unsupported(how), Some(what)) => bail!(
                "{n} of {name} lives in {how} at the entry of this {what}: tachy reads registers and stack slots only"
            ),
            (EntryLoc::NotAtEntry | EntryLoc::Frame, Some(what)) => bail!(
                "{n} of {name}: the DWARF of this {what} gives no location at its entry"
            ),
            // A function that follows the ABI has its arguments where the
            // ABI puts them at its first instruction, whatever DWARF says
            // of later instructions (-O0 code stores them in its frame).
            // On arm64, past x7 that is the stack from SP up; stack
            // operands are read from the frame key, which is one slot
            // below the entry SP there (regs.h frame_key): slot 0 is +8.
            (_, None) if self.arm64 => match abi::aapcs64_param_place(ps, k) {
                Some(EntryLoc::Reg(r)) => Source::Reg(r),
                Some(EntryLoc::Stack(off)) => match i32::try_from(off + 8) {
                    Ok(o) => Source::Stack(o),
                    Err(_) => bail!("{n} of {name} is on the stack at an offset tachy does not read ({off})"),
                },
                _ => bail!(
                    "{n} of {name} is not passed in an integer register or stack slot (after a struct, or past the eighth floating-point parameter): tachy cannot place it"
                ),
            },
            (_, None) => match self.abi_reg(ps, k) {
                Some(r) => Source::Reg(r),
                None => bail!(
                    "{n} of {name} is not passed in an integer register (after floating-point or struct parameters): tachy cannot place it"
                ),
            },
        };
        let place = match source {
            Source::Reg(r) => self.reg_name(r),
            Source::Stack(o) => format!("stack +{o}"),
            _ => unreachable!("a parameter is in a register or on the stack"),
        };
        Ok(Operand {
            source,
            size,
            signed,
            pointer: matches!(p.ty, ParamType::Pointer { .. }),
            what: format!("{n} ({place}, {ty})"),
            note: None,
        })
    }
}

/// How many parameters a slow-call record prints at most, and how many
/// argument registers when no DWARF names them.
pub const RECORD_PARAMS: usize = 6;
pub const RECORD_REGISTERS: usize = 3;

/// Where a slow-call record finds one argument's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fetch {
    /// The argument register saved at entry with this index (0 to 5, in
    /// ABI order: rdi, rsi, rdx, rcx, r8, r9; of a system call, its
    /// argument registers).
    Saved(u8),
    /// The same constant in every call (a `.constprop` clone).
    Const(i64),
    /// Not readable at the entry probe: why, in a few words.
    Unavailable(String),
}

/// How a record shows one argument's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shown {
    /// An integer of `size` bytes (the bits above it are not the value's).
    Int { size: u8, signed: bool },
    /// An address, in hex.
    Pointer,
    /// A whole register of unknown type: a number where it looks like
    /// one, hex where it looks like an address.
    Register,
}

/// One argument a slow-call record prints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordArg {
    /// The parameter's DWARF name, else `argN`.
    pub name: String,
    pub fetch: Fetch,
    pub shown: Shown,
}

impl RecordArg {
    /// The register a saved value is read from (x86 number).
    pub fn register(&self, syscall: bool) -> Option<u8> {
        match self.fetch {
            Fetch::Saved(i) if syscall => SYSCALL_REGS.get(i as usize).copied(),
            Fetch::Saved(i) => ABI_REGS.get(i as usize).copied(),
            _ => None,
        }
    }

    /// For `--dry-run`: `fd (rdi)`, `factor (constant 3)`.
    pub fn describe(&self, syscall: bool) -> String {
        let at = match &self.fetch {
            Fetch::Saved(_) => self
                .register(syscall)
                .map_or("?", |r| REG_NAMES[r as usize])
                .to_string(),
            Fetch::Const(c) => format!("constant {c}"),
            Fetch::Unavailable(why) => format!("unavailable: {why}"),
        };
        format!("{} ({at})", self.name)
    }
}

impl FuncArgs {
    /// What a slow-call record prints of a call's arguments: the first
    /// integer and pointer parameters (up to [`RECORD_PARAMS`]) by their
    /// DWARF names, read where this function's own DWARF (a clone's) or
    /// the ABI puts them at its entry; parameters a clone dropped are left
    /// out, a constant it folded is shown as such. Without DWARF (and for
    /// a system call), the first [`RECORD_REGISTERS`] argument registers
    /// as `arg0`... Floating-point and struct parameters are skipped.
    pub fn record_args(&self) -> Vec<RecordArg> {
        let registers = || {
            (0..RECORD_REGISTERS as u8)
                .map(|i| RecordArg {
                    name: format!("arg{i}"),
                    fetch: Fetch::Saved(i),
                    shown: Shown::Register,
                })
                .collect()
        };
        // Go passes arguments in its own registers: not read yet.
        if matches!(self.convention, Convention::Go) {
            return Vec::new();
        }
        let Some(ps) = &self.params else {
            return registers();
        };
        // What the BPF side saves: a function's ABI registers, a system
        // call's own.
        let saved: &[u8; 6] = match self.convention {
            _ if self.arm64 => &abi::AAPCS64_REGS,
            Convention::Syscall => &SYSCALL_REGS,
            _ => &ABI_REGS,
        };
        let mut out = Vec::new();
        for (k, p) in ps.params.iter().enumerate() {
            if out.len() == RECORD_PARAMS {
                break;
            }
            let Some((size, signed)) = width(&p.ty) else {
                continue;
            };
            if p.at_entry == EntryLoc::Absent && matches!(self.convention, Convention::Own(_)) {
                continue;
            }
            let shown = match p.ty {
                ParamType::Pointer { .. } => Shown::Pointer,
                _ => Shown::Int { size, signed },
            };
            let fetch = match (&p.at_entry, &self.convention) {
                (EntryLoc::Const(c), Convention::Own(_)) => Fetch::Const(*c),
                _ => match self.place(p.name.as_deref().unwrap_or("?"), k, p, ps) {
                    Ok(op) => match op.source {
                        Source::Reg(r) => match saved.iter().position(|&a| a == r) {
                            Some(i) => Fetch::Saved(i as u8),
                            None => {
                                Fetch::Unavailable(format!("in {} at the entry", self.reg_name(r)))
                            }
                        },
                        _ => Fetch::Unavailable("on the stack".into()),
                    },
                    Err(_) => Fetch::Unavailable("no location at the entry".into()),
                },
            };
            let name = match (&p.name, &fetch) {
                (Some(n), _) => n.clone(),
                (None, Fetch::Saved(i)) => format!("arg{i}"),
                (None, _) => format!("param{k}"),
            };
            out.push(RecordArg { name, fetch, shown });
        }
        out
    }
}

/// Width and signedness of a parameter compared as an integer.
fn width(ty: &ParamType) -> Option<(u8, bool)> {
    match ty {
        ParamType::Int { size, signed, .. } => Some((*size, *signed)),
        ParamType::Pointer { .. } => Some((8, false)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// clock_nanosleep as tracefs describes it.
    fn clock_nanosleep() -> FuncArgs {
        let args: Vec<(String, String)> = [
            ("const clockid_t", "which_clock"),
            ("int", "flags"),
            ("const struct __kernel_timespec *", "rqtp"),
            ("struct __kernel_timespec *", "rmtp"),
        ]
        .iter()
        .map(|(t, n)| (t.to_string(), n.to_string()))
        .collect();
        FuncArgs::for_syscall_with("syscall:clock_nanosleep", Some(&args))
    }

    #[test]
    fn system_call_arguments_have_their_kernel_names_and_types() {
        let f = clock_nanosleep();
        let op = f.resolve(&ArgRef::Name("which_clock".into())).unwrap();
        assert_eq!(
            (op.source, op.size, op.signed, op.pointer),
            (Source::Reg(7), 4, true, false)
        );
        assert_eq!(op.what, "which_clock (rdi, const clockid_t)");
        let op = f.resolve(&ArgRef::Name("rmtp".into())).unwrap();
        // The fourth system call argument is in r10, not rcx.
        assert_eq!((op.source, op.size, op.pointer), (Source::Reg(10), 8, true));
        let op = f.resolve(&ArgRef::Index(1)).unwrap();
        assert_eq!(op.what, "arg1 (rsi, flags: int)");
        assert_eq!(
            f.resolve(&ArgRef::Name("clock".into())).unwrap_err().to_string(),
            "syscall:clock_nanosleep has no parameter named clock (its parameters: which_clock, flags, rqtp, rmtp)"
        );
        let rec: Vec<(String, Fetch)> = f
            .record_args()
            .into_iter()
            .map(|a| (a.name, a.fetch))
            .collect();
        assert_eq!(
            rec,
            [
                ("which_clock".to_string(), Fetch::Saved(0)),
                ("flags".to_string(), Fetch::Saved(1)),
                ("rqtp".to_string(), Fetch::Saved(2)),
                ("rmtp".to_string(), Fetch::Saved(3)),
            ]
        );
        let bare = FuncArgs::for_syscall_with("syscall:close", None);
        assert_eq!(
            bare.resolve(&ArgRef::Name("fd".into())).unwrap_err().to_string(),
            "fd: this kernel's tracing does not name the arguments of syscall:close; use arg0 to arg5"
        );
    }

    #[test]
    fn system_call_types_give_width_and_sign() {
        let w = |t: &str| match abi::syscall_type(t) {
            ParamType::Int { size, signed, .. } => {
                format!("{size}{}", if signed { "s" } else { "u" })
            }
            ParamType::Pointer { .. } => "ptr".into(),
            other => panic!("{other:?}"),
        };
        assert_eq!(w("unsigned int"), "4u");
        assert_eq!(w("int"), "4s");
        assert_eq!(w("const clockid_t"), "4s");
        assert_eq!(w("size_t"), "8u");
        assert_eq!(w("loff_t"), "8s");
        assert_eq!(w("umode_t"), "2u");
        assert_eq!(w("const char __user *"), "ptr");
        assert_eq!(w("cap_user_header_t"), "ptr");
        assert_eq!(w("aio_context_t"), "8u");
    }

    fn int(name: &str, size: u8, signed: bool) -> ParamType {
        ParamType::Int {
            size,
            signed,
            name: name.into(),
        }
    }

    fn param(name: &str, ty: ParamType, at: EntryLoc) -> Param {
        Param {
            name: Some(name.into()),
            ty,
            at_entry: at,
            artificial: name == "this",
        }
    }

    /// `long Store::get(int key, double w, Point p, unsigned char* buf)` at
    /// -O0: every location is in the frame.
    fn method_o0() -> FuncParams {
        FuncParams {
            params: vec![
                param(
                    "this",
                    ParamType::Pointer {
                        name: "Store*".into(),
                    },
                    EntryLoc::Frame,
                ),
                param("key", int("int", 4, true), EntryLoc::Frame),
                param(
                    "w",
                    ParamType::Float {
                        name: "double".into(),
                    },
                    EntryLoc::Frame,
                ),
                param(
                    "buf",
                    ParamType::Pointer {
                        name: "unsigned char*".into(),
                    },
                    EntryLoc::Frame,
                ),
                param(
                    "p",
                    ParamType::Aggregate {
                        name: "struct Point".into(),
                    },
                    EntryLoc::Frame,
                ),
            ],
            nocall: false,
            returns: Default::default(),
        }
    }

    fn name(s: &str) -> ArgRef {
        ArgRef::parse(s).unwrap()
    }

    #[test]
    fn parses_operands() {
        assert_eq!(name("arg0"), ArgRef::Index(0));
        assert_eq!(name("arg5"), ArgRef::Index(5));
        assert_eq!(name("tid"), ArgRef::Tid);
        assert_eq!(name("pid"), ArgRef::Pid);
        assert_eq!(name("key"), ArgRef::Name("key".into()));
        assert_eq!(name("argv"), ArgRef::Name("argv".into()));
        assert_eq!(name("_x1"), ArgRef::Name("_x1".into()));
        let e = ArgRef::parse("arg6").unwrap_err().to_string();
        assert!(e.starts_with("arg6: only arg0 to arg5"), "{e}");
        assert!(ArgRef::parse("1x").is_err());
        assert!(ArgRef::parse("").is_err());
        assert!(ArgRef::parse("a-b").is_err());
    }

    #[test]
    fn abi_places_named_parameters_at_the_entry() {
        let f = FuncArgs::from_params("Store::get(int)", "", Some(method_o0()));
        let op = f.resolve(&name("this")).unwrap();
        assert_eq!((op.source, op.size, op.signed), (Source::Reg(7), 8, false));
        let op = f.resolve(&name("key")).unwrap();
        assert_eq!((op.source, op.size, op.signed), (Source::Reg(6), 4, true));
        assert_eq!(op.what, "key (rsi, int)");
        // The double goes to xmm0: buf is the third integer argument.
        let op = f.resolve(&name("buf")).unwrap();
        assert_eq!(op.source, Source::Reg(2));
        assert_eq!(op.note, None);
    }

    #[test]
    fn arg_n_takes_the_width_of_the_parameter_there() {
        let f = FuncArgs::from_params("Store::get(int)", "", Some(method_o0()));
        let op = f.resolve(&ArgRef::Index(1)).unwrap();
        assert_eq!((op.source, op.size, op.signed), (Source::Reg(6), 4, true));
        assert_eq!(op.what, "arg1 (rsi, key: int)");
        let op = f.resolve(&ArgRef::Index(0)).unwrap();
        assert_eq!(op.what, "arg0 (rdi, this: Store*)");
        // No DWARF: the whole register, signed.
        let bare = FuncArgs::from_params("f", "", None);
        let op = bare.resolve(&ArgRef::Index(3)).unwrap();
        assert_eq!((op.source, op.size, op.signed), (Source::Reg(1), 8, true));
        assert_eq!(op.what, "arg3 (rcx)");
    }

    #[test]
    fn refuses_what_is_not_an_integer() {
        let f = FuncArgs::from_params("Store::get(int)", "", Some(method_o0()));
        let err = |a: &str| f.resolve(&name(a)).unwrap_err().to_string();
        assert_eq!(
            err("w"),
            "w of Store::get(int) is floating point (double): tachy reads integers and pointers"
        );
        assert_eq!(
            err("p"),
            "p of Store::get(int) is passed by value as struct Point: tachy reads integers and pointers"
        );
        assert_eq!(
            err("nope"),
            "Store::get(int) has no parameter named nope (its parameters: this, key, w, buf, p)"
        );
        let bare = FuncArgs::from_params("f", "", None);
        assert_eq!(
            bare.resolve(&name("key")).unwrap_err().to_string(),
            "key: f has no DWARF parameter information (built without -g?); name its arguments arg0 to arg5"
        );
    }

    /// A clone that dropped `this`: `key` is in rdi, as its DWARF says, and
    /// `this` is refused.
    #[test]
    fn clones_are_read_where_their_dwarf_says() {
        let ps = FuncParams {
            params: vec![
                param("key", int("int", 4, true), EntryLoc::Reg(7)),
                param("limit", int("long", 8, true), EntryLoc::Const(100)),
                param(
                    "this",
                    ParamType::Pointer {
                        name: "Store*".into(),
                    },
                    EntryLoc::Absent,
                ),
                param(
                    "p",
                    int("int", 4, true),
                    EntryLoc::Unsupported("a computed location (a DWARF expression)".into()),
                ),
            ],
            nocall: false,
            returns: Default::default(),
        };
        let f = FuncArgs::from_params("Store::get(int) [clone .isra.0]", ".isra.0", Some(ps));
        let op = f.resolve(&name("key")).unwrap();
        assert_eq!((op.source, op.size, op.signed), (Source::Reg(7), 4, true));
        let err = |a: &str| f.resolve(&name(a)).unwrap_err().to_string();
        assert_eq!(
            err("this"),
            "this of Store::get(int) [clone .isra.0] was optimized out of this clone .isra.0: it has no value at the entry"
        );
        assert_eq!(
            err("limit"),
            "limit of Store::get(int) [clone .isra.0] is the constant 100 in this clone .isra.0: every call passes the same value"
        );
        assert!(
            err("p").contains("lives in a computed location"),
            "{}",
            err("p")
        );
        let op = f.resolve(&ArgRef::Index(0)).unwrap();
        assert_eq!(op.source, Source::Reg(7));
        assert_eq!(
            op.note.as_deref(),
            Some("Store::get(int) [clone .isra.0]: arg0 is register rdi of the clone .isra.0, which may drop or reorder parameters (its DWARF puts parameter key there)")
        );
        let op = f.resolve(&ArgRef::Index(1)).unwrap();
        assert!(op
            .note
            .unwrap()
            .ends_with("(its DWARF puts no parameter there)"));
    }

    #[test]
    fn system_calls_use_the_syscall_registers() {
        let f = FuncArgs::for_syscall_with("syscall:read", None);
        let op = f.resolve(&ArgRef::Index(3)).unwrap();
        assert_eq!(op.source, Source::Reg(10));
        assert_eq!(op.what, "arg3 (r10)");
        assert!(f.resolve(&name("fd")).is_err());
        let op = f.resolve(&ArgRef::Tid).unwrap();
        assert_eq!((op.source, op.size, op.signed), (Source::Tid, 4, false));
    }

    #[test]
    fn clobbered_registers_are_refused() {
        let mut f = FuncArgs::from_params("f", "", None);
        f.clobbered = 1 << 6;
        assert!(f.resolve(&ArgRef::Index(0)).is_ok());
        let e = f.resolve(&ArgRef::Index(1)).unwrap_err().to_string();
        assert!(e.contains("may overwrite rsi (arg1)"), "{e}");
    }

    #[test]
    fn records_show_integer_parameters_by_name() {
        let show = |f: &FuncArgs| -> Vec<String> {
            f.record_args().iter().map(|a| a.describe(false)).collect()
        };
        let f = FuncArgs::from_params("Store::get(int)", "", Some(method_o0()));
        // The double and the struct are skipped; buf is the third
        // integer register.
        assert_eq!(show(&f), ["this (rdi)", "key (rsi)", "buf (rdx)"]);
        assert_eq!(
            f.record_args()[1].shown,
            Shown::Int {
                size: 4,
                signed: true
            }
        );
        assert_eq!(f.record_args()[0].shown, Shown::Pointer);
        let clone = FuncParams {
            params: vec![
                param("key", int("int", 4, true), EntryLoc::Reg(7)),
                param("limit", int("long", 8, true), EntryLoc::Const(100)),
                param(
                    "this",
                    ParamType::Pointer { name: "S*".into() },
                    EntryLoc::Absent,
                ),
                param("p", int("int", 4, true), EntryLoc::Stack(8)),
                param("q", int("int", 4, true), EntryLoc::NotAtEntry),
            ],
            nocall: false,
            returns: Default::default(),
        };
        let f = FuncArgs::from_params("S::get [clone .isra.0]", ".isra.0", Some(clone));
        assert_eq!(
            show(&f),
            [
                "key (rdi)",
                "limit (constant 100)",
                "p (unavailable: on the stack)",
                "q (unavailable: no location at the entry)"
            ]
        );
        let bare = FuncArgs::from_params("f", "", None);
        assert_eq!(show(&bare), ["arg0 (rdi)", "arg1 (rsi)", "arg2 (rdx)"]);
        let sys = FuncArgs::for_syscall_with("syscall:read", None).record_args();
        assert_eq!(sys[2].describe(true), "arg2 (rdx)");
        // Six at most.
        let many = FuncParams {
            params: (0..8)
                .map(|i| param(&format!("a{i}"), int("long", 8, true), EntryLoc::Frame))
                .collect(),
            nocall: false,
            returns: Default::default(),
        };
        let f = FuncArgs::from_params("g", "", Some(many));
        assert_eq!(show(&f).len(), RECORD_PARAMS);
        assert_eq!(show(&f)[5], "a5 (r9)");
    }

    #[test]
    fn operands_hold_values_of_their_type() {
        let mut op = Operand::plain(Source::Reg(7), "x".into());
        assert!(op.holds(-1) && op.holds(u64::MAX as i128) && !op.holds(1 << 64));
        op.size = 4;
        assert!(op.holds(i32::MIN as i128) && !op.holds(1 << 31));
        op.signed = false;
        assert!(op.holds(u32::MAX as i128) && !op.holds(-1));
    }
}
