//! `tachy list`'s arguments validated: `[PATH|LIB] PATTERN...` read into
//! function specs, as `tachy latency` would take them.

use anyhow::Result;

use super::args::ListArgs;
use super::usage;
use crate::resolve::FuncSpec;
use crate::symbols::Pattern;

/// Validated arguments of `tachy list`.
#[derive(Clone, Debug)]
pub struct ListSettings {
    pub specs: Vec<FuncSpec>,
    pub pid: Option<u32>,
    pub sites: bool,
}

impl ListArgs {
    pub fn validate(self) -> Result<ListSettings> {
        let spec_of = |a: &String| FuncSpec::parse(a).map_err(|e| usage(format!("{e:#}")));
        let pattern_of = |a: &String| Pattern::parse(a).map_err(|e| usage(format!("{e:#}")));
        let (first, rest) = match self.args.split_first() {
            Some(split) => split,
            None => return Err(usage("expected [PATH] PATTERN...")),
        };
        let specs: Vec<FuncSpec> = if rest.is_empty() {
            if self.pid.is_none() && !first.contains(':') && std::path::Path::new(first).is_file() {
                return Err(usage(format!(
                    "no pattern: give one after {} (e.g. '*' for every function)",
                    crate::symbols::quoted(first)
                )));
            }
            vec![spec_of(first)?]
        } else if self.pid.is_some() {
            if first.contains('/') && !first.contains(':') {
                return Err(usage("give either -p PID or a PATH, not both"));
            }
            self.args.iter().map(spec_of).collect::<Result<_>>()?
        } else if spec_of(first)?.object.is_some() {
            // PATH:PATTERN or LIB:PATTERN, each.
            self.args.iter().map(spec_of).collect::<Result<_>>()?
        } else {
            // PATH PATTERN... or LIB PATTERN...; a LIB:PATTERN among them
            // names its own library.
            rest.iter()
                .map(|p| {
                    let spec = spec_of(p)?;
                    if spec.object.is_some() {
                        return Ok(spec);
                    }
                    Ok(FuncSpec {
                        object: Some(first.clone()),
                        pattern: pattern_of(p)?,
                    })
                })
                .collect::<Result<_>>()?
        };
        // A file in the current directory named without `./` is that
        // file, not a library to look up by name.
        let specs = specs
            .into_iter()
            .map(|spec| match &spec.object {
                Some(o)
                    if self.pid.is_none()
                        && !o.contains('/')
                        && std::path::Path::new(o).is_file() =>
                {
                    FuncSpec {
                        object: Some(format!("./{o}")),
                        ..spec
                    }
                }
                _ => spec,
            })
            .collect();
        Ok(ListSettings {
            specs,
            pid: self.pid,
            sites: self.sites,
        })
    }
}
