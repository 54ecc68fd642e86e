//! The scenario and the replay inputs as TOML.

use std::fmt::Write as _;

use super::{Batching, Continuous, Dynamic, Pool, Service, Spec};

fn ns(value: u64) -> String {
    format!("\"{value}ns\"")
}

/// The default pool's replay inputs (`capsim simulate --replay-inputs`): its hand-over per
/// request and its pauses, which a scenario does not take. Empty when it has none.
pub fn replay_toml(spec: &Spec) -> String {
    let mut s = String::new();
    if let Batching::Dynamic(d) = &spec.pools[0].batching {
        if d.release_latency_per_request_ns > 0 {
            writeln!(
                s,
                "release_latency_per_request = {}",
                ns(d.release_latency_per_request_ns)
            )
            .unwrap();
        }
        if !d.pauses.is_empty() {
            let windows: Vec<String> = d
                .pauses
                .iter()
                .map(|&(from, to)| format!("{{ from = {}, to = {} }}", ns(from), ns(to)))
                .collect();
            writeln!(s, "pauses = [{}]", windows.join(", ")).unwrap();
        }
    }
    s
}

pub fn scenario_toml(spec: &Spec, seed: u64) -> String {
    let mut s = format!(
        "name = \"swarm-{seed}\"\ninstances = {}\n",
        spec.pools[0].instances
    );
    // The default pool's top-level keys, before any table.
    limits_toml(&mut s, &spec.pools[0]);
    path_toml(&mut s, spec);
    for (index, pool) in spec.pools.iter().enumerate() {
        let prefix = if index == 0 {
            String::new()
        } else {
            let name = &pool.name;
            writeln!(s, "[pools.{name}]\ninstances = {}", pool.instances).unwrap();
            limits_toml(&mut s, pool);
            let models: Vec<String> = pool.models.iter().map(|m| format!("\"{m}\"")).collect();
            writeln!(
                s,
                "models = [{}]\nclasses = [{}]",
                models.join(", "),
                pool.classes
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
            .unwrap();
            format!("pools.{name}.")
        };
        pool_toml(&mut s, &prefix, pool);
    }
    s
}

/// The tables of a request's way to the pools: load, network, gateway, cache and retry.
fn path_toml(s: &mut String, spec: &Spec) {
    if let Some((concurrency, think_ns)) = spec.closed {
        writeln!(
            s,
            "[load]\nmode = \"closed\"\nconcurrency = {concurrency}\nthink_time = {}",
            ns(think_ns)
        )
        .unwrap();
    }
    if spec.one_way_ns > 0 {
        writeln!(
            s,
            "[network.latency]\nkind = \"constant\"\none_way = {}",
            ns(spec.one_way_ns)
        )
        .unwrap();
    }
    writeln!(
        s,
        "[gateway]\noverhead = {}\nload_balancing = \"{}\"",
        ns(spec.overhead_ns),
        spec.balancing
    )
    .unwrap();
    if let Some((rate, burst)) = spec.rate_limit {
        writeln!(s, "rate_limit = \"{rate}rps\"\nburst = {burst}").unwrap();
    }
    if let Some(limit) = spec.max_in_flight {
        writeln!(s, "max_in_flight = {limit}").unwrap();
    }
    if let Some((p, latency_ns)) = spec.cache {
        writeln!(
            s,
            "[cache]\nhit_probability = {p}\nlatency = {}",
            ns(latency_ns)
        )
        .unwrap();
    }
    if let Some(r) = &spec.retry {
        let mut on = Vec::new();
        if r.on_rejected {
            on.push("\"rejected\"");
        }
        if r.on_timed_out {
            on.push("\"timed_out\"");
        }
        writeln!(
            s,
            "[retry]\nmax_attempts = {}\nbackoff = {}\nbackoff_multiplier = {:?}\non = [{}]",
            r.max_attempts,
            ns(r.backoff_ns),
            r.multiplier,
            on.join(", ")
        )
        .unwrap();
    }
}

/// The pool's token limits, keys of its top-level table.
fn limits_toml(s: &mut String, pool: &Pool) {
    if let Some(limit) = pool.max_input_tokens {
        writeln!(s, "max_input_tokens = {limit}").unwrap();
    }
    if let Some(limit) = pool.max_output_tokens {
        writeln!(s, "max_output_tokens = {limit}").unwrap();
    }
}

/// One pool's tables, each key under `prefix` (empty for the default pool, else `pools.NAME.`).
fn pool_toml(s: &mut String, prefix: &str, pool: &Pool) {
    stages_toml(s, prefix, pool);
    match &pool.batching {
        Batching::Dynamic(d) => {
            dynamic_toml(s, prefix, d);
            service_toml(s, prefix, &d.service);
        }
        Batching::Continuous(c) => continuous_toml(s, prefix, pool, c),
    }
    if let Some((base_ns, per_ns)) = pool.postprocess {
        writeln!(
            s,
            "[{prefix}postprocess]\nbase = {}\nper_output_token = {}",
            ns(base_ns),
            ns(per_ns)
        )
        .unwrap();
    }
}

/// The pool's standby, pre-processing, queue and execution tables.
fn stages_toml(s: &mut String, prefix: &str, pool: &Pool) {
    if pool.standby > 0 {
        writeln!(
            s,
            "[{prefix}standby]\ninstances = {}\nactivate_at_outstanding = {}",
            pool.standby, pool.activate_at_outstanding
        )
        .unwrap();
    }
    if let Some((workers, base_ns, per_ns)) = pool.preprocess {
        writeln!(
            s,
            "[{prefix}preprocess]\nbase = {}\nper_input_token = {}",
            ns(base_ns),
            ns(per_ns)
        )
        .unwrap();
        if pool.host.is_none() {
            // With a host, its cores run the pre-processing.
            writeln!(s, "workers = {workers}").unwrap();
        }
    }
    if let Some((cores, request_ns, per_ns, response_ns)) = pool.host {
        writeln!(
            s,
            "[{prefix}host]\ncores = {cores}\nrequest = {}\nrequest_per_input_token = {}\nresponse = {}",
            ns(request_ns),
            ns(per_ns),
            ns(response_ns)
        )
        .unwrap();
    }
    writeln!(
        s,
        "[{prefix}queue]\npriority_levels = {}\nmax_queue_size = {}",
        pool.priority_levels, pool.max_queue_size
    )
    .unwrap();
    if let Some(timeout_ns) = pool.timeout_ns {
        writeln!(
            s,
            "timeout = {}\ntimeout_action = \"{}\"",
            ns(timeout_ns),
            if pool.timeout_delay {
                "delay"
            } else {
                "reject"
            }
        )
        .unwrap();
    }
    writeln!(
        s,
        "[{prefix}execution]\ngpus = {}\ninstance_count = {}\ncold_start = {}",
        pool.gpus,
        pool.instance_count,
        ns(pool.cold_start_ns)
    )
    .unwrap();
}

/// A dynamic pool's `[batcher]` table.
fn dynamic_toml(s: &mut String, prefix: &str, d: &Dynamic) {
    writeln!(
        s,
        "[{prefix}batcher]\nmax_batch_size = {}\nmax_queue_delay = {}",
        d.max_batch_size,
        ns(d.max_queue_delay_ns)
    )
    .unwrap();
    if !d.preferred.is_empty() {
        writeln!(s, "preferred_batch_size = {:?}", d.preferred).unwrap();
    }
    if d.prefetch_off {
        writeln!(s, "prefetch = false").unwrap();
    }
    if d.dispatch_latency_ns > 0 {
        writeln!(s, "dispatch_latency = {}", ns(d.dispatch_latency_ns)).unwrap();
    }
    if d.release_latency_ns > 0 {
        writeln!(s, "release_latency = {}", ns(d.release_latency_ns)).unwrap();
    }
}

/// A dynamic pool's `[service]` table.
fn service_toml(s: &mut String, prefix: &str, service: &Service) {
    match *service {
        Service::Constant { time_ns } => writeln!(
            s,
            "[{prefix}service]\nkind = \"constant\"\ntime = {}",
            ns(time_ns)
        ),
        Service::Affine { a_ns, b_ns, c_ns } => writeln!(
            s,
            "[{prefix}service]\nkind = \"affine\"\na = {}\nb = {}\nc = {}",
            ns(a_ns),
            ns(b_ns),
            ns(c_ns)
        ),
        Service::Exponential { mean_ns } => writeln!(
            s,
            "[{prefix}service]\nkind = \"exponential\"\nmean = {}",
            ns(mean_ns)
        ),
    }
    .unwrap();
}

/// A continuous pool's `[batcher]`, `[kv_cache]` and `[step_time]` tables.
fn continuous_toml(s: &mut String, prefix: &str, pool: &Pool, c: &Continuous) {
    writeln!(
        s,
        "[{prefix}batcher]\nkind = \"continuous\"\nmax_num_seqs = {}\n\
         max_num_batched_tokens = {}\nenable_chunked_prefill = {}\n\
         step_overhead = {}\nstep_overhead_per_seq = {}\nschedule_ahead_steps = {}",
        c.max_num_seqs,
        c.max_num_batched_tokens,
        c.chunked_prefill,
        ns(c.step_overhead_ns),
        ns(c.step_overhead_per_seq_ns),
        c.schedule_ahead_steps
    )
    .unwrap();
    if pool.priority_levels > 1 {
        writeln!(s, "scheduling = \"priority\"").unwrap();
    }
    writeln!(
        s,
        "[{prefix}kv_cache]\nblock_size = {}\nnum_gpu_blocks = {}\n\
         enable_prefix_caching = {}\nprefix_block_tokens = {}",
        c.block_size, c.num_gpu_blocks, c.prefix_caching, c.prefix_block_tokens
    )
    .unwrap();
    writeln!(
        s,
        "[{prefix}step_time]\nkind = \"linear\"\nbase = {}\nper_prefill_token = {}\n\
         per_decode_seq = {}\nper_kv_token = {}",
        ns(c.base_ns),
        ns(c.per_prefill_token_ns),
        ns(c.per_decode_seq_ns),
        ns(c.per_kv_token_ns)
    )
    .unwrap();
}
