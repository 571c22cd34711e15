//! Metrics that leave tachy while it traces: the `/metrics` endpoint of
//! `--prometheus` and the file of `--textfile`. The run loop hands this
//! module the expositions (`crate::report::prom`); this module never reads
//! the kernel. A scrape asks the run loop for fresh counters and waits for
//! them a short while (the loop looks every 50 ms); the probes and the BPF
//! program never wait for a scrape.
//!
//! The HTTP server is tiny_http: a small synchronous server with no async
//! runtime, which is all one endpoint read every few seconds needs.

use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};

use crate::report::prom::openmetrics_to_text;

/// How long a scrape waits for the run loop to read the kernel's counters
/// before it is served the last exposition instead.
const SCRAPE_WAIT: Duration = Duration::from_secs(2);

const OPENMETRICS_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const TEXT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What the HTTP thread and the run loop share.
#[derive(Default)]
struct State {
    /// The last exposition, OpenMetrics text.
    body: String,
    /// Counts publications, so a waiting scrape sees a fresh one.
    generation: u64,
    /// A scrape waits for fresh counters.
    wanted: bool,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    published: Condvar,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The `/metrics` endpoint and the textfile, set up before any probe is
/// attached so that a busy port or an unwritable directory costs no run.
pub struct Exporter {
    shared: Arc<Shared>,
    server: Option<(Arc<tiny_http::Server>, JoinHandle<()>, SocketAddr)>,
    textfile: Option<PathBuf>,
    /// When the textfile is next rewritten, and how often.
    next_write: Instant,
    every: Duration,
}

impl Exporter {
    /// Listens on `listen` (if any) and writes `initial` to `textfile`
    /// (if any), so both fail here rather than after attaching.
    pub fn start(
        listen: Option<SocketAddr>,
        textfile: Option<&Path>,
        every: Duration,
        initial: String,
    ) -> Result<Exporter> {
        let shared = Arc::new(Shared::default());
        shared.lock().body = initial.clone();
        if let Some(path) = textfile {
            write_atomically(path, &openmetrics_to_text(&initial))?;
        }
        let server = match listen {
            Some(addr) => {
                let listener = TcpListener::bind(addr)
                    .with_context(|| format!("cannot listen on {addr} for --prometheus"))?;
                let bound = listener.local_addr().unwrap_or(addr);
                let server = tiny_http::Server::from_listener(listener, None)
                    .map_err(|e| anyhow!("cannot serve metrics on {addr}: {e}"))?;
                let server = Arc::new(server);
                let (srv, sh) = (Arc::clone(&server), Arc::clone(&shared));
                let thread = std::thread::Builder::new()
                    .name("tachy-metrics".into())
                    .spawn(move || serve(&srv, &sh))
                    .context("cannot start the metrics server thread")?;
                Some((server, thread, bound))
            }
            None => None,
        };
        Ok(Exporter {
            shared,
            server,
            textfile: textfile.map(Path::to_path_buf),
            next_write: Instant::now() + every,
            every,
        })
    }

    /// The address the endpoint listens on (the port chosen by the system
    /// when 0 was asked for).
    pub fn address(&self) -> Option<SocketAddr> {
        self.server.as_ref().map(|(_, _, a)| *a)
    }

    /// Whether the run loop should read the counters and publish: a scrape
    /// waits, or the textfile is due.
    pub fn due(&self, now: Instant) -> bool {
        (self.textfile.is_some() && now >= self.next_write) || self.shared.lock().wanted
    }

    /// Publishes a new exposition (OpenMetrics text): serves it, and
    /// writes the textfile when it is due or `last` (tracing ends).
    pub fn publish(&mut self, openmetrics: String, now: Instant, last: bool) -> Result<()> {
        if let Some(path) = &self.textfile {
            if last || now >= self.next_write {
                write_atomically(path, &openmetrics_to_text(&openmetrics))?;
                while self.next_write <= now {
                    self.next_write += self.every;
                }
            }
        }
        let mut st = self.shared.lock();
        st.body = openmetrics;
        st.generation += 1;
        st.wanted = false;
        self.shared.published.notify_all();
        Ok(())
    }
}

/// How long ending the exporter waits for a response in flight (to a
/// client that may not be reading) before leaving it to the process's exit.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(1);

impl Drop for Exporter {
    fn drop(&mut self) {
        if let Some((server, thread, _)) = self.server.take() {
            server.unblock();
            let until = Instant::now() + SHUTDOWN_WAIT;
            while !thread.is_finished() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(10));
            }
            if thread.is_finished() {
                let _ = thread.join();
            }
        }
    }
}

/// Answers requests until the server is unblocked: `/metrics` (GET or
/// HEAD) with fresh counters, anything else 404.
fn serve(server: &tiny_http::Server, shared: &Shared) {
    for req in server.incoming_requests() {
        let path = req.url().split('?').next().unwrap_or("");
        let method_ok = matches!(
            req.method(),
            tiny_http::Method::Get | tiny_http::Method::Head
        );
        let response = if path != "/metrics" {
            tiny_http::Response::from_string("not found: tachy serves /metrics\n")
                .with_status_code(404)
        } else if !method_ok {
            tiny_http::Response::from_string("only GET and HEAD\n").with_status_code(405)
        } else {
            let openmetrics = req.headers().iter().any(|h| {
                h.field.equiv("Accept") && h.value.as_str().contains("application/openmetrics-text")
            });
            let body = fresh_body(shared);
            let (body, ctype) = if openmetrics {
                (body, OPENMETRICS_TYPE)
            } else {
                (openmetrics_to_text(&body), TEXT_TYPE)
            };
            let mut r = tiny_http::Response::from_string(body);
            if let Ok(h) = tiny_http::Header::from_bytes(&b"Content-Type"[..], ctype.as_bytes()) {
                r = r.with_header(h);
            }
            r
        };
        // A client that went away is its own business.
        let _ = req.respond(response);
    }
}

/// Asks the run loop for fresh counters and waits for them (at most
/// [`SCRAPE_WAIT`]); returns the newest exposition.
fn fresh_body(shared: &Shared) -> String {
    let mut st = shared.lock();
    let seen = st.generation;
    st.wanted = true;
    let deadline = Instant::now() + SCRAPE_WAIT;
    while st.generation == seen {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        st = match shared.published.wait_timeout(st, left) {
            Ok((g, _)) => g,
            Err(e) => e.into_inner().0,
        };
    }
    st.body.clone()
}

/// Replaces `path` with `text` so that a reader sees the old file or the
/// new one, never part of one: the text goes to a temporary file in the
/// same directory (so on the same file system), which is then renamed
/// over `path`.
pub fn write_atomically(path: &Path, text: &str) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| anyhow!("--textfile {}: not a file name", path.display()))?;
    // node_exporter reads only files ending in .prom: the temporary
    // file's name does not.
    let tmp = dir.join(format!(
        ".{}.tmp.{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_data()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        anyhow!("cannot write {}: {e}", path.display())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::fs::MetadataExt;

    fn get(addr: SocketAddr, path: &str, accept: &str) -> String {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: x\r\nAccept: {accept}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn textfile_is_replaced_by_rename() {
        let dir = std::env::temp_dir().join(format!("tachy-export-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tachy.prom");
        write_atomically(&path, "a 1\n").unwrap();
        let ino = std::fs::metadata(&path).unwrap().ino();
        write_atomically(&path, "a 2\n").unwrap();
        assert_ne!(std::fs::metadata(&path).unwrap().ino(), ino);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a 2\n");
        // No temporary file is left behind.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        let err = write_atomically(&dir.join("no/such/dir/x.prom"), "")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("cannot write "), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn scrapes_wait_for_fresh_counters_and_other_paths_are_404() {
        let om = "# TYPE x counter\nx_total 1\n# EOF\n".to_string();
        let listen = "127.0.0.1:0".parse().unwrap();
        let mut ex = Exporter::start(Some(listen), None, Duration::from_secs(15), om).unwrap();
        let addr = ex.address().unwrap();
        assert!(get(addr, "/", "*/*").starts_with("HTTP/1.1 404"));
        let scrape = std::thread::spawn(move || get(addr, "/metrics", "*/*"));
        // The scrape asks for fresh counters: publish them once it does.
        let deadline = Instant::now() + Duration::from_secs(5);
        while !ex.due(Instant::now()) {
            assert!(Instant::now() < deadline, "no scrape arrived");
            std::thread::sleep(Duration::from_millis(5));
        }
        ex.publish(
            "# TYPE x counter\nx_total 2\n# EOF\n".into(),
            Instant::now(),
            false,
        )
        .unwrap();
        let got = scrape.join().unwrap();
        assert!(got.starts_with("HTTP/1.1 200"), "{got}");
        assert!(got.contains("text/plain; version=0.0.4"), "{got}");
        assert!(
            got.ends_with("# TYPE x_total counter\nx_total 2\n"),
            "{got}"
        );
        // OpenMetrics when asked for; the last exposition when nobody
        // publishes (after the wait).
        let got = get(
            addr,
            "/metrics",
            "application/openmetrics-text;version=1.0.0",
        );
        assert!(got.contains(OPENMETRICS_TYPE), "{got}");
        assert!(got.ends_with("x_total 2\n# EOF\n"), "{got}");
        // A second listener on the same port is refused with the address.
        let err = Exporter::start(Some(addr), None, Duration::from_secs(1), String::new())
            .err()
            .unwrap();
        assert!(
            format!("{err:#}").starts_with(&format!("cannot listen on {addr} for --prometheus:")),
            "{err:#}"
        );
    }
}
