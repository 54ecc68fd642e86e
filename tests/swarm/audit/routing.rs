//! Routing: the pool follows the request's model, else its class, else the default pool; the
//! instance (standby ones only where configured) and model instance indices exist.

use super::{check, id, pool_of};
use crate::case::Case;
use crate::records::{Rec, present};

/// The instance is one of the pool's instances or standby instances.
pub fn instance_exists(case: &Case, r: &Rec) -> Option<String> {
    let p = pool_of(case, r)?;
    let servers = u64::from(p.instances + p.standby);
    check(r.instance < servers, || {
        format!("{}: instance {} of a pool of {servers}", id(r), r.instance)
    })
}

pub fn model_instance_exists(case: &Case, r: &Rec) -> Option<String> {
    let p = pool_of(case, r)?;
    check(
        !present(r.model_instance) || r.model_instance < u64::from(p.model_instances()),
        || format!("{}: model instance {}", id(r), r.model_instance),
    )
}

pub fn pool_follows_model_then_class(case: &Case, r: &Rec) -> Option<String> {
    let p = pool_of(case, r)?;
    let (spec, trace) = (&case.spec, &case.trace);
    let row = r.request as usize;
    let by_model = trace
        .model
        .as_ref()
        .and_then(|m| spec.pools.iter().position(|q| q.models.contains(&m[row])));
    let by_class = trace
        .class
        .as_ref()
        .and_then(|c| spec.pools.iter().position(|q| q.classes.contains(&c[row])));
    let expected = &spec.pools[by_model.or(by_class).unwrap_or(0)].name;
    check(&p.name == expected, || {
        format!(
            "{}: in pool {}, its model and class route to {expected}",
            id(r),
            p.name
        )
    })
}
