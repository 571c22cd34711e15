//! Value parsers: one command-line value into its type, as clap calls them
//! while it parses, with errors worded as clap words its own.

use std::net::SocketAddr;
use std::time::Duration;

use crate::duration::{parse_duration, parse_seconds};
use crate::plan::by::ByKey;
use crate::plan::filter::Filter;
use crate::plan::Expand;
use crate::resolve::FuncSpec;

/// [`FuncSpec::parse`] as a clap value parser.
pub(super) fn parse_func_spec(s: &str) -> std::result::Result<FuncSpec, String> {
    FuncSpec::parse(s).map_err(|e| format!("{e:#}"))
}

/// `--by KEY` as clap parses it: with [`ByKey::parse`], naming the keys
/// that are not a parameter's name as possible values, which the
/// completion scripts offer (no value is refused for not being one of them).
#[derive(Clone)]
pub(super) struct ByKeyParser;

/// The keys `--by` takes besides a parameter's name.
pub const BY_KEYS: [&str; 11] = [
    "caller",
    "tid",
    "pid",
    "goroutine",
    "retval",
    "arg0",
    "arg1",
    "arg2",
    "arg3",
    "arg4",
    "arg5",
];

impl clap::builder::TypedValueParser for ByKeyParser {
    type Value = ByKey;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> std::result::Result<ByKey, clap::Error> {
        clap::builder::TypedValueParser::parse_ref(&ByKey::parse, cmd, arg, value)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            BY_KEYS
                .iter()
                .map(|k| clap::builder::PossibleValue::new(*k)),
        ))
    }
}

/// What `--expand` names, as a clap value parser.
pub(super) fn parse_expand(s: &str) -> std::result::Result<Expand, String> {
    Expand::parse(s).map_err(|e| format!("{e:#}"))
}

/// A clap value parser whose error quotes a long value shortened (clap
/// quotes it whole: a 100 KB pattern, 100 KB of error).
#[derive(Clone)]
pub struct Quoted<F>(pub F);

impl<T, F> clap::builder::TypedValueParser for Quoted<F>
where
    F: Fn(&str) -> std::result::Result<T, String> + Clone + Send + Sync + 'static,
    T: Clone + Send + Sync + 'static,
{
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> std::result::Result<T, clap::Error> {
        let Some(s) = value.to_str() else {
            return Err(clap::Error::new(clap::error::ErrorKind::InvalidUtf8).with_cmd(cmd));
        };
        (self.0)(s).map_err(|e| {
            let arg = arg.map(|a| a.to_string()).unwrap_or_default();
            let value = crate::symbols::quoted(s);
            // As clap words it, with the hint it gives.
            clap::Error::raw(
                clap::error::ErrorKind::ValueValidation,
                format!(
                    "invalid value {value} for '{arg}': {e}\n\nFor more information, try '--help'.\n"
                ),
            )
            .with_cmd(cmd)
        })
    }
}

/// A `--filter` expression, as a clap value parser.
pub(super) fn parse_filter(s: &str) -> std::result::Result<Filter, String> {
    Filter::parse(s).map_err(|e| format!("{e:#}"))
}

/// `--max-overhead`: a percentage, `10` or `10%`, from 0 (off) to 1000.
pub(super) fn parse_pct(s: &str) -> std::result::Result<f64, String> {
    let t = s.trim();
    let t = t.strip_suffix('%').unwrap_or(t).trim();
    match t.parse::<f64>() {
        Ok(v) if (0.0..=1000.0).contains(&v) => Ok(v),
        Ok(_) => Err(format!(
            "{s:?} is not a percentage from 0 (no budget) to 1000"
        )),
        Err(_) => Err(format!("{s:?} is not a percentage (e.g. 10 or 2.5%)")),
    }
}

/// A process or thread id: a positive number.
pub(super) fn parse_id(s: &str) -> std::result::Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(0) => Err("0 is not a process or thread id".into()),
        Ok(n) if n <= i32::MAX as u32 => Ok(n),
        _ => Err(format!("{s:?} is not a process or thread id")),
    }
}

/// The address of `--prometheus`: `ADDR:PORT`, `[V6ADDR]:PORT`,
/// `HOST:PORT`, or a port alone (on 127.0.0.1).
pub(super) fn parse_listen(s: &str) -> std::result::Result<SocketAddr, String> {
    use std::net::{Ipv4Addr, ToSocketAddrs};
    let t = s.trim();
    if let Ok(port) = t.trim_start_matches(':').parse::<u16>() {
        return Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
    }
    if let Ok(addr) = t.parse::<SocketAddr>() {
        return Ok(addr);
    }
    if !t.contains(':') {
        return Err(format!(
            "{s:?} is not ADDR:PORT or a port (e.g. 127.0.0.1:9464)"
        ));
    }
    match t.to_socket_addrs().map(|mut a| a.next()) {
        Ok(Some(addr)) => Ok(addr),
        _ => Err(format!(
            "{s:?} is not ADDR:PORT or a port (e.g. 127.0.0.1:9464)"
        )),
    }
}

/// `--label NAME=VALUE`: a Prometheus label name tachy does not set itself.
pub(super) fn parse_label(s: &str) -> std::result::Result<(String, String), String> {
    use crate::report::prom::{valid_label_name, RESERVED_LABELS};
    let Some((name, value)) = s.split_once('=') else {
        return Err(format!("{s:?} is not NAME=VALUE"));
    };
    if !valid_label_name(name) {
        return Err(format!(
            "{name:?} is not a label name: letters, digits and _, not first a digit, not starting with __"
        ));
    }
    if RESERVED_LABELS.contains(&name) {
        return Err(format!(
            "{name:?} is a label tachy sets itself ({})",
            RESERVED_LABELS.join(", ")
        ));
    }
    Ok((name.to_string(), value.to_string()))
}

/// A duration with its unit, as a clap value parser.
pub(super) fn parse_duration_arg(s: &str) -> std::result::Result<u64, String> {
    parse_duration(s).map_err(|e| format!("{e:#}"))
}

/// The shortest interval of `-i`: reading and printing every function's
/// counters more often would be most of what tachy does.
const MIN_INTERVAL: Duration = Duration::from_millis(10);

/// The time of `-i`: as [`parse_seconds`], at least [`MIN_INTERVAL`].
pub(super) fn parse_interval(s: &str) -> std::result::Result<Duration, String> {
    let d = parse_seconds(s)?;
    if d < MIN_INTERVAL {
        return Err(format!("{s:?} is shorter than 10ms, the shortest interval"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::duration::POSITIVE;
    use crate::symbols::Pattern;

    #[test]
    fn specs_split_on_a_lone_colon() {
        assert_eq!(
            FuncSpec::parse("ns::Class::read").unwrap(),
            FuncSpec {
                object: None,
                pattern: Pattern::parse("ns::Class::read").unwrap()
            }
        );
        assert_eq!(
            FuncSpec::parse("c:malloc").unwrap(),
            FuncSpec {
                object: Some("c".into()),
                pattern: Pattern::parse("malloc").unwrap()
            }
        );
        assert_eq!(
            FuncSpec::parse("/usr/bin/x:ns::f(int)").unwrap(),
            FuncSpec {
                object: Some("/usr/bin/x".into()),
                pattern: Pattern::parse("ns::f(int)").unwrap()
            }
        );
        assert_eq!(
            FuncSpec::parse("libstdc++:std::foo").unwrap(),
            FuncSpec {
                object: Some("libstdc++".into()),
                pattern: Pattern::parse("std::foo").unwrap()
            }
        );
        assert!(FuncSpec::parse(":x").is_err());
        assert!(FuncSpec::parse("lib:").is_err());
        assert!(FuncSpec::parse("lib: ").is_err());
        assert!(FuncSpec::parse("").is_err());
        assert!(FuncSpec::parse(" ").is_err());
    }

    #[test]
    fn seconds() {
        let ms = |n| Ok(Duration::from_millis(n));
        assert_eq!(parse_seconds("5"), ms(5000));
        assert_eq!(parse_seconds("0.5"), ms(500));
        assert_eq!(parse_seconds("250ms"), ms(250));
        assert_eq!(parse_seconds("2m"), ms(120_000));
        for bad in ["0", "0s", "-1", "soon", "1e99", "inf", "nan"] {
            assert!(parse_seconds(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_seconds("999999999"), ms(999_999_999_000));
        for long in ["1000000000", "1e99", "inf", "20000000m"] {
            assert_eq!(
                parse_seconds(long).unwrap_err(),
                format!("{long:?} is longer than 999999999 seconds (31 years), the most")
            );
        }
        assert_eq!(parse_interval("10ms"), ms(10));
        assert_eq!(
            parse_interval("1ns").unwrap_err(),
            "\"1ns\" is shorter than 10ms, the shortest interval"
        );
        for negative in ["-1", "-0.5", "-2s"] {
            assert_eq!(parse_seconds(negative).unwrap_err(), POSITIVE, "{negative}");
        }
    }

    #[test]
    fn ids() {
        assert_eq!(parse_id("4242"), Ok(4242));
        for bad in ["0", "-1", "x", "4294967295", ""] {
            assert!(parse_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn listen_addresses() {
        let a = |s: &str| parse_listen(s).map(|a| a.to_string());
        assert_eq!(a("9464"), Ok("127.0.0.1:9464".into()));
        assert_eq!(a(":9464"), Ok("127.0.0.1:9464".into()));
        assert_eq!(a("0.0.0.0:9464"), Ok("0.0.0.0:9464".into()));
        assert_eq!(a("[::1]:9464"), Ok("[::1]:9464".into()));
        for bad in ["", "x", "70000", "1.2.3.4", "1.2.3.4:x"] {
            assert!(parse_listen(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn labels() {
        assert_eq!(
            parse_label("env=prod=1"),
            Ok(("env".into(), "prod=1".into()))
        );
        assert_eq!(parse_label("dc="), Ok(("dc".into(), String::new())));
        for bad in ["env", "=x", "1x=y", "a-b=c", "__x=y", "function=f", "le=1"] {
            assert!(parse_label(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250us").unwrap(), 250_000);
        assert_eq!(parse_duration("1ms").unwrap(), 1_000_000);
        assert_eq!(parse_duration("1.5ms").unwrap(), 1_500_000);
        assert_eq!(parse_duration("2s").unwrap(), 2_000_000_000);
        assert_eq!(parse_duration("100ns").unwrap(), 100);
        assert!(parse_duration("100")
            .unwrap_err()
            .to_string()
            .contains("needs a unit"));
        assert!(parse_duration("1h").is_err());
        assert!(parse_duration("ms").is_err());
        assert!(parse_duration("1e400s").is_err());
    }
}
