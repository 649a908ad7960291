//! `[[vrf]]`: the VRF names (each defined once; the default VRF always exists), and the
//! lookup that every `vrf = "..."` key elsewhere goes through.

use std::collections::HashMap;

use vmpls_fib::DEFAULT_VRF_NAME;

use super::S;
use super::ctx::Ctx;
use super::raw::RawVrf;
use super::values::check_name;
use crate::ConfigError;

/// The VRFs: the default one first, then the `[[vrf]]`s in file order.
pub(super) fn parse_vrfs(ctx: &Ctx, raw: &[RawVrf]) -> Result<Vec<String>, ConfigError> {
    let mut vrfs = vec![DEFAULT_VRF_NAME.to_string()];
    let mut vrf_lines: HashMap<String, usize> = HashMap::new();
    for v in raw {
        let name = check_name(ctx, &v.name, "vrf.name", "VRF")?;
        let line = ctx.line(&v.name.span());
        if let Some(first) = vrf_lines.insert(name.clone(), line) {
            return Err(ctx.err_line(
                line,
                "vrf.name",
                format!("VRF \"{name}\" is already defined at line {first}"),
            ));
        }
        if name != DEFAULT_VRF_NAME {
            vrfs.push(name);
        }
    }
    Ok(vrfs)
}

/// The VRF that `field` names: the default one when absent, else one of `vrfs`.
pub(super) fn vrf_of(
    ctx: &Ctx,
    vrfs: &[String],
    s: Option<&S<String>>,
    field: &str,
) -> Result<String, ConfigError> {
    match s {
        None => Ok(DEFAULT_VRF_NAME.to_string()),
        Some(s) if vrfs.contains(s.get_ref()) => Ok(s.get_ref().clone()),
        Some(s) => Err(ctx.err(
            &s.span(),
            field,
            format!("VRF \"{}\" is not defined; add [[vrf]] with name = \"{}\"", s.get_ref(), s.get_ref()),
        )),
    }
}
