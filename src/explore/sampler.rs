//! The privileged side of `tachy explore`'s sampling profile: loads
//! `profile.bpf.c` for one process, opens a ~99 Hz CPU-clock perf event on
//! each CPU for its sampling program, hooks `sched_switch` for blocked
//! time, and hands the events read from the ring buffer over as plain data.
//! The only module of `explore` that touches libbpf-rs; dropping a
//! [`Sampler`] detaches everything (the links and perf events are file
//! descriptors, so the kernel removes them even if tachy is killed).

use std::cell::RefCell;
use std::mem::MaybeUninit;
use std::os::fd::{FromRawFd, OwnedFd};
use std::rc::Rc;
use std::time::Duration;

use anyhow::{anyhow, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject};

mod skel {
    #![allow(clippy::all, dead_code, unused_imports, non_camel_case_types)]
    include!(concat!(env!("OUT_DIR"), "/profile.skel.rs"));
}

use skel::{types, ProfileSkel, ProfileSkelBuilder};

/// Samples per second of each CPU's timer.
pub const HZ: u64 = 99;

/// What a stack event says (`enum profile_kind` of profile.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// On a CPU, from the sampling timer.
    OnCpu,
    /// Going to sleep (blocked).
    Off,
}

/// A thread's user registers and the top of its user stack.
#[derive(Clone, Debug)]
pub struct StackEvent {
    pub kind: Kind,
    pub tid: u32,
    /// CLOCK_MONOTONIC ns.
    pub ns: u64,
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    /// Stack memory from the page holding `sp` (page aligned) up.
    pub base: u64,
    pub stack: Vec<u8>,
}

/// An event of the ring buffer.
#[derive(Clone, Debug)]
pub enum Event {
    Stack(StackEvent),
    /// Thread `tid`, asleep since its last [`Kind::Off`], runs again.
    Back {
        tid: u32,
        ns: u64,
    },
}

// SAFETY: profile_head and profile_stack are plain old data generated
// from profile.h: integers and a byte array, valid for any bit pattern.
unsafe impl plain::Plain for types::profile_head {}
// SAFETY: as profile_head.
unsafe impl plain::Plain for types::profile_stack {}

impl Event {
    /// Decodes one ring-buffer record (layouts of profile.h).
    fn decode(b: &[u8]) -> Option<Event> {
        let h: &types::profile_head = plain::from_bytes(b).ok()?;
        let kind = match types::profile_kind(h.kind) {
            types::profile_kind::PROFILE_ON_CPU => Kind::OnCpu,
            types::profile_kind::PROFILE_OFF => Kind::Off,
            _ => {
                return Some(Event::Back {
                    tid: h.tid,
                    ns: h.ns,
                })
            }
        };
        let s: &types::profile_stack = plain::from_bytes(b).ok()?;
        let len = (s.pages as usize * PAGE).min(s.stack.len());
        Some(Event::Stack(StackEvent {
            kind,
            tid: h.tid,
            ns: h.ns,
            ip: s.ip,
            sp: s.sp,
            bp: s.bp,
            base: s.sp & !(PAGE as u64 - 1),
            stack: s.stack[..len].to_vec(),
        }))
    }
}

/// PROFILE_PAGE of profile.h: the stack is copied in whole pages.
const PAGE: usize = 4096;

/// The profile's programs, attached to one process.
pub struct Sampler {
    skel: ProfileSkel<'static>,
    links: Vec<Link>,
    /// The perf events the sampling program is attached to, one per CPU.
    _events: Vec<OwnedFd>,
    ring: libbpf_rs::RingBuffer<'static>,
    got: Rc<RefCell<Vec<Event>>>,
}

impl Sampler {
    /// Loads the profile for process `tgid` and starts it.
    pub fn start(tgid: u32) -> Result<Sampler> {
        // The open object outlives the skeleton that borrows it; a few bytes
        // per profile, for the life of the process.
        let storage: &'static mut MaybeUninit<OpenObject> =
            Box::leak(Box::new(MaybeUninit::uninit()));
        let mut open = ProfileSkelBuilder::default()
            .open(storage)
            .map_err(|e| anyhow!("cannot open the profile's BPF program: {e}"))?;
        open.maps
            .rodata_data
            .as_deref_mut()
            .ok_or_else(|| anyhow!("the profile's BPF program has no settings"))?
            .target_tgid = tgid;
        let skel = open
            .load()
            .map_err(|e| anyhow!("cannot load the profile's BPF program: {e}"))?;
        let mut links = Vec::new();
        links.push(
            skel.progs
                .profile_switch
                .attach()
                .map_err(|e| anyhow!("cannot attach to sched_switch for blocked time: {e}"))?,
        );
        let mut events = Vec::new();
        let cpus = online_cpus();
        for cpu in cpus {
            let fd = cpu_clock(cpu as i32)?;
            links.push(
                skel.progs
                    .profile_sample
                    .attach_perf_event(std::os::fd::AsRawFd::as_raw_fd(&fd))
                    .map_err(|e| anyhow!("cannot attach the sampling program to CPU {cpu}: {e}"))?,
            );
            events.push(fd);
        }
        let got = Rc::new(RefCell::new(Vec::new()));
        let sink = got.clone();
        let map = libbpf_rs::MapHandle::try_from(&skel.maps.events)
            .map_err(|e| anyhow!("cannot read the profile's ring buffer: {e}"))?;
        let mut builder = libbpf_rs::RingBufferBuilder::new();
        builder
            .add(&map, move |bytes: &[u8]| {
                if let Some(e) = Event::decode(bytes) {
                    sink.borrow_mut().push(e);
                }
                0
            })
            .map_err(|e| anyhow!("cannot read the profile's ring buffer: {e}"))?;
        let ring = builder
            .build()
            .map_err(|e| anyhow!("cannot read the profile's ring buffer: {e}"))?;
        Ok(Sampler {
            skel,
            links,
            _events: events,
            ring,
            got,
        })
    }

    /// The events that arrived, waiting up to `timeout` for the first.
    pub fn read(&mut self, timeout: Duration) -> Vec<Event> {
        let _ = self.ring.poll(timeout);
        std::mem::take(&mut *self.got.borrow_mut())
    }

    /// Events the ring buffer had no room for, since the start.
    pub fn lost(&self) -> u64 {
        let key = 0u32.to_ne_bytes();
        match self.skel.maps.lost.lookup_percpu(&key, MapFlags::ANY) {
            Ok(Some(per_cpu)) => per_cpu
                .iter()
                .filter_map(|v| Some(u64::from_ne_bytes(v.get(..8)?.try_into().ok()?)))
                .sum(),
            _ => 0,
        }
    }

    /// Programs and perf events in place.
    pub fn links(&self) -> usize {
        self.links.len()
    }
}

/// The CPUs online (`/sys/devices/system/cpu/online`: `0-3,6`).
fn online_cpus() -> Vec<u32> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let mut out = Vec::new();
    for part in text.trim().split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
            out.extend(a..=b);
        }
    }
    if out.is_empty() {
        out.push(0);
    }
    out
}

/// A CPU-clock perf event on `cpu` at [`HZ`], counting every process.
fn cpu_clock(cpu: i32) -> Result<OwnedFd> {
    // struct perf_event_attr, PERF_ATTR_SIZE_VER5 (112 bytes): type,
    // size, config, sample_freq, sample_type, read_format, then the flag
    // bits (`freq` is bit 10).
    let mut attr = [0u64; 14];
    const PERF_TYPE_SOFTWARE: u64 = 1;
    const PERF_COUNT_SW_CPU_CLOCK: u64 = 0;
    attr[0] = PERF_TYPE_SOFTWARE | ((std::mem::size_of_val(&attr) as u64) << 32);
    attr[1] = PERF_COUNT_SW_CPU_CLOCK;
    attr[2] = HZ;
    attr[5] = 1 << 10;
    const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
    // SAFETY: perf_event_open reads `attr` (a complete, zero-padded
    // perf_event_attr of the size it states) and returns a new descriptor
    // or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr.as_ptr(),
            -1i32,
            cpu,
            -1i32,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(anyhow!(
            "cannot open a CPU-clock perf event on CPU {cpu}: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: fd is a descriptor perf_event_open just returned, owned by
    // no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}
