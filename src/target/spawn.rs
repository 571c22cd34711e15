//! Starting a command to trace: found on PATH as a shell would, checked
//! runnable, and held before exec until its probes are attached.

use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// The ELF program that runs when `exe` is executed: `exe` itself, or for
/// a script (`#!`), its interpreter (through `/usr/bin/env NAME` too).
/// Its libraries are the ones a command's `LIB:FUNC` can name before the
/// command starts.
pub fn program_image(exe: &Path) -> PathBuf {
    let mut cur = exe.to_path_buf();
    // The kernel follows at most a few levels of interpreters.
    for _ in 0..4 {
        let Some(next) = interpreter(&cur) else {
            break;
        };
        cur = next;
    }
    cur
}

/// The interpreter a `#!` line names, resolved.
fn interpreter(script: &Path) -> Option<PathBuf> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = fs::File::open(script).ok()?.read(&mut head).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = &line[..line.iter().position(|&b| b == b'\n')?];
    let line = String::from_utf8_lossy(line);
    let mut words = line.split_whitespace();
    let interp = PathBuf::from(words.next()?);
    if interp.file_name().is_some_and(|n| n == "env") {
        let name = words.find(|w| !w.starts_with('-') && !w.contains('='))?;
        return which(name).ok();
    }
    interp.is_file().then_some(interp)
}

/// Finds a command on PATH, as a shell would.
pub fn which(cmd: &str) -> Result<PathBuf> {
    if cmd.contains('/') {
        let p = PathBuf::from(cmd);
        if !p.is_file() {
            bail!("no such file: {cmd}");
        }
        return Ok(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    for dir in std::env::split_paths(&path) {
        let p = dir.join(cmd);
        if is_executable(&p) {
            return Ok(p);
        }
    }
    bail!("command not found: {cmd}")
}

/// Fails unless `exe` can be run: execute permission, and an ELF file
/// or a script with `#!`. Checked before any probe is attached.
pub fn check_runnable(exe: &Path) -> Result<()> {
    if !is_executable(exe) {
        bail!("cannot run {}: not executable", exe.display());
    }
    let mut head = [0u8; 4];
    let n = fs::File::open(exe)
        .and_then(|mut f| std::io::Read::read(&mut f, &mut head))
        .with_context(|| format!("cannot run {}", exe.display()))?;
    if !(head[..n].starts_with(b"\x7fELF") || head[..n].starts_with(b"#!")) {
        bail!(
            "cannot run {}: neither a program nor a script starting with #!",
            exe.display()
        );
    }
    Ok(())
}

fn is_executable(p: &Path) -> bool {
    let Ok(c) = CString::new(p.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: access() reads the NUL-terminated path only.
    p.is_file() && unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0
}

/// A command tachy started, held before exec until probes are attached.
pub struct Spawned {
    pub pid: u32,
    /// The executable it runs.
    pub exe: PathBuf,
    go: Option<fs::File>,
    err: fs::File,
    reaped: Option<i32>,
}

impl Spawned {
    /// Forks; the child waits for `release` and then execs `argv`. With
    /// `stdout_to_stderr`, the command writes its standard output to
    /// tachy's standard error.
    pub fn start(exe: &Path, argv: &[String], stdout_to_stderr: bool) -> Result<Spawned> {
        use std::os::fd::FromRawFd;
        let path =
            CString::new(exe.as_os_str().as_bytes()).context("command path contains a NUL byte")?;
        let args: Vec<CString> = argv
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<_, _>>()
            .context("command argument contains a NUL byte")?;
        let mut argp: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
        argp.push(std::ptr::null());
        let mut go = [0i32; 2];
        let mut err = [0i32; 2];
        // SAFETY: pipe2 fills the two-element arrays it is given.
        unsafe {
            if libc::pipe2(go.as_mut_ptr(), libc::O_CLOEXEC) != 0
                || libc::pipe2(err.as_mut_ptr(), libc::O_CLOEXEC) != 0
            {
                bail!("cannot create a pipe: {}", std::io::Error::last_os_error());
            }
        }
        // SAFETY: after fork the child calls only async-signal-safe functions
        // (read, write, dup2, execv, _exit) on memory prepared before the fork.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            bail!("cannot fork: {}", std::io::Error::last_os_error());
        }
        if pid == 0 {
            unsafe {
                libc::close(go[1]);
                libc::close(err[0]);
                let mut b = 0u8;
                let n = libc::read(go[0], (&mut b as *mut u8).cast(), 1);
                if n != 1 {
                    libc::_exit(127);
                }
                if stdout_to_stderr && libc::dup2(2, 1) < 0 {
                    libc::_exit(127);
                }
                libc::execv(path.as_ptr(), argp.as_ptr());
                let e = *libc::__errno_location();
                libc::write(err[1], (&e as *const i32).cast(), 4);
                libc::_exit(127);
            }
        }
        // SAFETY: these descriptors are ours and closed exactly once.
        unsafe {
            libc::close(go[0]);
            libc::close(err[1]);
        }
        Ok(Spawned {
            pid: pid as u32,
            exe: exe.to_path_buf(),
            go: Some(unsafe { fs::File::from_raw_fd(go[1]) }),
            err: unsafe { fs::File::from_raw_fd(err[0]) },
            reaped: None,
        })
    }

    /// Lets the command exec. Fails if exec failed.
    pub fn release(&mut self) -> Result<()> {
        use std::io::{Read, Write};
        if let Some(mut go) = self.go.take() {
            go.write_all(b"g").context("cannot start the command")?;
        }
        let mut e = [0u8; 4];
        // The error pipe closes on a successful exec (O_CLOEXEC).
        let n = self.err.read(&mut e).unwrap_or(0);
        if n == 4 {
            let _ = self.wait();
            bail!(
                "cannot run the command: {}",
                std::io::Error::from_raw_os_error(i32::from_ne_bytes(e))
            );
        }
        Ok(())
    }

    /// Reaps the command if it has exited; its shell-style exit code.
    pub fn try_wait(&mut self) -> Option<i32> {
        if self.reaped.is_none() {
            let mut st = 0;
            // SAFETY: waitpid on our own child.
            let r = unsafe { libc::waitpid(self.pid as i32, &mut st, libc::WNOHANG) };
            if r == self.pid as i32 {
                self.reaped = Some(decode_status(st));
            }
        }
        self.reaped
    }

    pub fn wait(&mut self) -> i32 {
        if let Some(c) = self.reaped {
            return c;
        }
        self.go.take();
        let mut st = 0;
        // SAFETY: waitpid on our own child.
        let r = unsafe { libc::waitpid(self.pid as i32, &mut st, 0) };
        let code = if r == self.pid as i32 {
            decode_status(st)
        } else {
            1
        };
        self.reaped = Some(code);
        code
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        // Never started (attach failed): the child is still waiting for the
        // go byte; closing the pipe makes it exit without running anything.
        if self.go.take().is_some() {
            self.wait();
        }
    }
}

fn decode_status(st: i32) -> i32 {
    if libc::WIFEXITED(st) {
        libc::WEXITSTATUS(st)
    } else if libc::WIFSIGNALED(st) {
        128 + libc::WTERMSIG(st)
    } else {
        1
    }
}
