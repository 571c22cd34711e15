//! Arbitrary bytes as x86-64 code of a function (and sometimes a `.cold`
//! fragment): decoding, entry choice and probe points must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tachy::disasm::{decode, Range};
use tachy::plan::choose_entry;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    // Low bits: one range at 0x1000, or two (body and fragment) split at a
    // point the next byte picks, the fragment after the body, before it, or
    // overlapping it. Bit 2: bases the fuzzer picks (the end of each range
    // still fits in 64 bits, as ElfObject::code guarantees).
    let (split_byte, code) = match rest.split_first() {
        Some((&s, c)) if mode & 3 != 0 => (s, c),
        _ => (0, rest),
    };
    let mut base = 0x1000u64;
    let mut code = code;
    if mode & 4 != 0 && code.len() >= 8 {
        let (b, c) = code.split_at(8);
        base = u64::from_le_bytes(b.try_into().unwrap());
        code = c;
        base = base.min(u64::MAX - code.len() as u64);
    }
    let at = (split_byte as usize * code.len()) / 256;
    let (body, frag) = code.split_at(at.max(1).min(code.len()));
    let r = |addr, bytes| Range { addr, bytes };
    let ranges: Vec<Range<'_>> = match mode & 3 {
        0 => vec![r(base, code)],
        1 => {
            let faddr = base.saturating_add(body.len() as u64 + 0x100);
            vec![
                r(base, body),
                r(faddr.min(u64::MAX - frag.len() as u64), frag),
            ]
        }
        2 => {
            let faddr = base.saturating_sub(frag.len() as u64 + 0x40);
            vec![r(base, body), r(faddr, frag)]
        }
        _ => vec![r(base, body), r(base, frag)],
    };
    let Ok(d) = decode(&ranges) else {
        return;
    };
    let _ = choose_entry(&d, &|_| true);
    let _ = choose_entry(&d, &|_| false);
    let _ = choose_entry(&d, &|a| a & 1 == 0);
    for &a in &d.boundaries {
        let _ = d.probe_points_from(a);
        let _ = d.only_epilogue_from(a);
    }
    let _ = d.probe_points_from(d.body_end);
    let _ = d.only_epilogue_from(u64::MAX);
});
