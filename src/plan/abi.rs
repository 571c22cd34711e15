//! The register tables of the calling conventions tachy reads arguments
//! under: which register holds the Nth integer argument of a SysV x86-64
//! call, an x86-64 system call, an AAPCS64 (arm64) call and an arm64
//! system call, and how a register is named in messages. Registers are
//! numbered as `tachy.h` numbers them: x86 encoding numbers on x86-64
//! (0 rax ... 7 rdi, 8-15 r8-r15), `xN` as N on arm64. A system call's
//! arguments are typed from their C types as tracefs writes them. Go's register ABI
//! is not read (its functions' arguments are refused by `args`). Pure
//! data; nothing here decides which convention a function follows.

use crate::symbols::elf::params::{EntryLoc, FuncParams, Param, ParamType, REG_NAMES};

/// Integer argument registers of the SysV x86-64 function call ABI, as
/// x86 encoding numbers: rdi, rsi, rdx, rcx, r8, r9.
pub const ABI_REGS: [u8; 6] = [7, 6, 2, 1, 8, 9];

/// Argument registers of the x86-64 system call ABI: rdi, rsi, rdx, r10,
/// r8, r9.
pub const SYSCALL_REGS: [u8; 6] = [7, 6, 2, 10, 8, 9];

/// The register of integer argument `i` under AAPCS64: `xi` (x0-x7).
pub fn aapcs64_reg(i: u8) -> u8 {
    i
}

/// The register of system call argument `i` on the architecture tachy was
/// built for: x86-64's syscall ABI, or `xi` on arm64.
pub fn syscall_reg(i: u8) -> u8 {
    if cfg!(target_arch = "aarch64") {
        i
    } else {
        SYSCALL_REGS[i as usize]
    }
}

/// Register `r` as messages name it: `rdi` on x86-64, `x0` on arm64.
pub fn reg_name(arm64: bool, r: u8) -> String {
    if arm64 {
        format!("x{r}")
    } else {
        REG_NAMES[r as usize & 15].to_string()
    }
}

/// The parameters of a system call whose arguments are (C type, name), in
/// the syscall ABI's registers. The kernel passes each in a full register;
/// its C type gives the width and sign that count (`int fd` compares as a
/// 32-bit signed value); a type not known here reads as 64 unsigned bits.
pub fn syscall_params(args: &[(String, String)]) -> FuncParams {
    let params = args
        .iter()
        .zip(0u8..6)
        .map(|((ty, name), i)| Param {
            name: Some(name.clone()),
            ty: syscall_type(ty),
            at_entry: EntryLoc::Reg(syscall_reg(i)),
            artificial: false,
        })
        .collect();
    FuncParams {
        params,
        nocall: false,
        returns: Default::default(),
    }
}

/// A system call argument's C type (as tracefs writes it) as a parameter
/// type.
pub fn syscall_type(ty: &str) -> ParamType {
    let name = ty.to_string();
    let base: Vec<&str> = ty
        .split_whitespace()
        .filter(|w| !matches!(*w, "const" | "volatile" | "__user"))
        .collect();
    let base = base.join(" ");
    // Typedefs of pointers the kernel's syscall headers use.
    if ty.contains('*') || matches!(base.as_str(), "cap_user_header_t" | "cap_user_data_t") {
        return ParamType::Pointer { name };
    }
    let (size, signed) = match base.as_str() {
        "char" | "signed char" => (1, true),
        "unsigned char" | "u8" | "__u8" => (1, false),
        "short" | "s16" => (2, true),
        "unsigned short" | "umode_t" | "u16" | "__u16" => (2, false),
        "int" | "signed int" | "pid_t" | "clockid_t" | "timer_t" | "key_t" | "mqd_t"
        | "key_serial_t" | "rwf_t" | "s32" | "__s32" => (4, true),
        "unsigned int" | "unsigned" | "uid_t" | "gid_t" | "qid_t" | "u32" | "__u32" => (4, false),
        "long" | "long int" | "off_t" | "loff_t" | "ssize_t" | "time_t" | "s64" | "__s64"
        | "long long" => (8, true),
        _ => (8, false),
    };
    ParamType::Int { size, signed, name }
}

/// Integer argument registers of AAPCS64 that tachy reads: x0-x5 (the
/// BPF side saves six, as on x86-64).
pub const AAPCS64_REGS: [u8; 6] = [0, 1, 2, 3, 4, 5];

/// The register the SysV ABI passes parameter `k` in, counting the integer
/// and pointer parameters before it; None past the sixth, or after a
/// parameter whose class takes more thought (a struct by value, a type
/// DWARF does not give).
pub fn sysv_reg(ps: &FuncParams, k: usize) -> Option<u8> {
    int_arg_reg(ps, k, &ABI_REGS)
}

/// The register AAPCS64 passes parameter `k` in: as [`sysv_reg`], integer
/// and pointer parameters take x0, x1, ... in order while floating-point
/// ones take vector registers of their own.
pub fn aapcs64_param_reg(ps: &FuncParams, k: usize) -> Option<u8> {
    int_arg_reg(ps, k, &AAPCS64_REGS)
}

/// Where AAPCS64 passes integer or pointer parameter `k` at the entry:
/// x0-x7 for the first eight, then the stack, each in an 8-byte slot in
/// order from SP (AAPCS64 C.12-C.16, as Linux lays them out). None after a
/// parameter whose place is not counted here: a struct, one wider than 8
/// bytes, or a ninth floating-point one (it takes a stack slot too).
pub fn aapcs64_param_place(ps: &FuncParams, k: usize) -> Option<EntryLoc> {
    let (mut ints, mut floats) = (0u8, 0u8);
    for (i, p) in ps.params.iter().enumerate() {
        let int = match &p.ty {
            ParamType::Int { size, .. } if *size <= 8 => true,
            ParamType::Pointer { .. } => true,
            ParamType::Float { .. } => false,
            _ => return None,
        };
        if i == k {
            return match (int, ints) {
                (false, _) => None,
                (true, 0..=7) => Some(EntryLoc::Reg(ints)),
                (true, n) => Some(EntryLoc::Stack(8 * (i64::from(n) - 8))),
            };
        }
        if int {
            ints = ints.checked_add(1)?;
        } else {
            floats += 1;
            if floats > 8 {
                return None;
            }
        }
    }
    None
}

/// Parameter `k`'s register among `regs`, the integer argument registers
/// in order, counting the integer and pointer parameters before it.
fn int_arg_reg(ps: &FuncParams, k: usize, regs: &[u8]) -> Option<u8> {
    let mut n = 0usize;
    for (i, p) in ps.params.iter().enumerate() {
        let int = match &p.ty {
            ParamType::Int { .. } | ParamType::Pointer { .. } => true,
            ParamType::Float { .. } => false,
            _ => return None,
        };
        if i == k {
            return int.then(|| regs.get(n).copied()).flatten();
        }
        if int {
            n += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param(ty: ParamType) -> Param {
        Param {
            name: None,
            ty,
            at_entry: EntryLoc::Frame,
            artificial: false,
        }
    }

    /// `f(int, double, long)`: the long is the second integer argument
    /// under both ABIs, the double takes no integer register.
    #[test]
    fn integer_parameters_count_past_floating_point_ones() {
        let int = |name: &str, size| ParamType::Int {
            size,
            signed: true,
            name: name.into(),
        };
        let ps = FuncParams {
            params: vec![
                param(int("int", 4)),
                param(ParamType::Float {
                    name: "double".into(),
                }),
                param(int("long", 8)),
            ],
            nocall: false,
            returns: Default::default(),
        };
        assert_eq!(
            (0..3).map(|k| sysv_reg(&ps, k)).collect::<Vec<_>>(),
            [Some(7), None, Some(6)]
        );
        assert_eq!(
            (0..3)
                .map(|k| aapcs64_param_reg(&ps, k))
                .collect::<Vec<_>>(),
            [Some(0), None, Some(1)]
        );
    }

    /// `f(long a0, ..., double d, long a9)`: a0-a7 in x0-x7, a8 and a9 in
    /// the first two stack slots (the double takes v0).
    #[test]
    fn aapcs64_passes_the_ninth_integer_on_the_stack() {
        let long = || ParamType::Int {
            size: 8,
            signed: true,
            name: "long".into(),
        };
        let mut params: Vec<Param> = (0..9).map(|_| param(long())).collect();
        params.push(param(ParamType::Float {
            name: "double".into(),
        }));
        params.push(param(long()));
        let ps = FuncParams {
            params,
            nocall: false,
            returns: Default::default(),
        };
        let got: Vec<_> = (0..11).map(|k| aapcs64_param_place(&ps, k)).collect();
        let mut want: Vec<_> = (0..8).map(|r| Some(EntryLoc::Reg(r))).collect();
        want.extend([Some(EntryLoc::Stack(0)), None, Some(EntryLoc::Stack(8))]);
        assert_eq!(got, want);
    }
}
