//! Prometheus metrics, named after Triton's conventions with a `sluice_` prefix.
//!
//! [`Metrics`] holds what only the invocation path knows (outcomes, latencies, kernel
//! launches), updated as invocations finish. Everything the platform can already report
//! (device schedulers, tenant accounts, functions loaded, compilations, in flight) is read
//! from a [`Status`] snapshot at scrape time, so it is never stale and needs no hooks.
//! [`Metrics::render`] writes both in the OpenMetrics text format (which Prometheus
//! scrapes), ending in `# EOF`:
//!
//! | family | type | labels |
//! |---|---|---|
//! | `sluice_invocations_total` | counter | `tenant`, `function`, `outcome` (`ok` or the error code) |
//! | `sluice_invocation_duration_seconds` | histogram | `tenant`, `function` (successful ones, admission to result) |
//! | `sluice_queue_duration_seconds` | histogram | `tenant`, `function` (admission → instantiation) |
//! | `sluice_instantiate_duration_seconds` | histogram | `tenant`, `function` |
//! | `sluice_execute_duration_seconds` | histogram | `tenant`, `function` (the guest's `run`) |
//! | `sluice_kernel_launches_total` | counter | `tenant`, `function` |
//! | `sluice_time_to_first_token_seconds` | histogram | `tenant`, `function` (a streaming invocation's admission → first chunk) |
//! | `sluice_time_per_output_token_seconds` | histogram | `tenant`, `function` (its mean gap between later chunks) |
//! | `sluice_functions_loaded`, `sluice_in_flight` | gauge | — |
//! | `sluice_compilations_total` | counter | — |
//! | `sluice_batch_guest_yields_total` (batch-class guests yielding their core at an epoch tick) | counter | — |
//! | `sluice_batch_guest_pauses_total` (batch-class guests pausing while latency work needs their core) | counter | — |
//! | `sluice_device_queued`, `sluice_device_active_invocations`, `sluice_device_resident_bytes` | gauge | `device` |
//! | `sluice_device_kernels_total`, `sluice_device_busy_seconds_total`, `sluice_device_preemptions_total`, `sluice_device_sliced_kernels_total` | counter | `device` |
//! | `sluice_device_healthy` (1 or 0) | gauge | `device` |
//! | `sluice_device_contained_faults_total` (backend panics that failed one command) | counter | `device` |
//! | `sluice_device_resets_total` (losses of the device, each failing the work in flight, then a reset) | counter | `device` |
//! | `sluice_tenant_device_seconds_total` | counter | `device`, `tenant`, `class` |
//! | `sluice_tenant_memory_used_bytes`, `sluice_tenant_memory_quota_bytes` | gauge | `tenant` |
//! | `sluice_tenant_weights_placed_bytes` (artifact bytes its loaded versions placed, within its quota) | gauge | `tenant` |
//! | `sluice_tenant_old_versions_loaded` (non-serving versions kept loaded) | gauge | `tenant` |
//! | `sluice_device_status_computations_total` (status snapshots the scheduler computed, shared by every caller) | counter | `device` |
//! | `sluice_tenant_live_feeds_open` | gauge | `tenant` |
//! | `sluice_status_requests_refused_total`, `sluice_live_feeds_refused_total` (429s of the watching limits) | counter | — |
//! | `sluice_tenant_host_memory_used_bytes`, `sluice_tenant_stream_queued_bytes` | gauge | `tenant` |
//! | `sluice_tenant_host_memory_refused_total` (413 `decoded_too_large`, 429 `host_memory_budget`) | counter | `tenant` |
//! | `sluice_stream_queue_peak_bytes` (the most one streamed invocation had queued) | gauge | — |
//! | `sluice_stream_stalls_total` (streamed invocations cancelled for a client that read nothing) | counter | — |
//! | `sluice_instance_pool_slots_used`, `sluice_instance_pool_slots_capacity` | gauge | `kind` (`component_instances`, `core_instances`, `memories`, `tables`) |
//! | `sluice_warm_instances` | gauge | — |
//! | `sluice_warm_memory_bytes` | gauge | — |
//! | `sluice_tenant_warm_instances` | gauge | `tenant` |
//! | `sluice_tenant_warm_memory_bytes` | gauge | `tenant` |
//! | `sluice_artifact_metadata_bytes` (parsed GGUF metadata of loaded artifacts) | gauge | — |
//! | `sluice_tenant_disk_used_bytes`, `sluice_tenant_disk_quota_bytes` (bytes of the blobs its versions reference) | gauge | `tenant` |
//! | `sluice_tenant_uploads_in_flight`, `sluice_tenant_upload_limit` | gauge | `tenant` |
//!
//! Label values are bounded: tenants and functions exist in the registry (an invocation
//! of a name that is not deployed counts under `function="(unknown)"`), outcomes are the
//! stable error codes, and a deleted function's or tenant's series are removed.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use parking_lot::Mutex;
use prometheus_client::encoding::{EncodeLabelSet, text};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry, Unit};
use sluice_host_api::Code;

use super::stats::StatsTable;
use super::{Invocation, Status};
use crate::scheduler::PriorityClass;

/// Upper bounds of the duration histograms' buckets, in seconds: 100 µs to 60 s.
pub const DURATION_BUCKETS: [f64; 18] =
    [1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FunctionLabels {
    tenant: String,
    function: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    tenant: String,
    function: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SlotLabels {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeviceLabels {
    device: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeviceTenantLabels {
    device: String,
    tenant: String,
    class: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantLabels {
    tenant: String,
}

type Histograms = Family<FunctionLabels, Histogram, fn() -> Histogram>;

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

/// Powers of two up to the largest batch size.
const BATCH_BUCKETS: [f64; 11] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0];

fn batch_histogram() -> Histogram {
    Histogram::new(BATCH_BUCKETS)
}

/// The platform's invocation metrics. Cheap to update from many threads at once.
#[derive(Debug)]
pub struct Metrics {
    invocations: Family<OutcomeLabels, Counter>,
    invocation_duration: Histograms,
    queue_duration: Histograms,
    instantiate_duration: Histograms,
    execute_duration: Histograms,
    kernel_launches: Family<FunctionLabels, Counter>,
    /// Invocations of each function whose guest runs now (an autoscaler's signal).
    function_in_flight: Family<FunctionLabels, Gauge>,
    /// Invocations of each function admitted, loaded and waiting for a guest thread.
    function_queued: Family<FunctionLabels, Gauge>,
    time_to_first_token: Histograms,
    time_per_output_token: Histograms,
    /// Requests that shared each successful request's invocation, for functions deployed
    /// with batching and serving functions.
    batch_size: Histograms,
    /// tenant → every `(function, outcome)` with a series, to remove them on delete
    /// (a `Family` cannot be iterated). Written only when a series is created.
    series: Mutex<HashMap<String, HashSet<(String, &'static str)>>>,
    /// The same invocations as Triton's statistics extension reports them.
    pub(crate) stats: StatsTable,
}

impl Default for Metrics {
    fn default() -> Self {
        let histograms = || Histograms::new_with_constructor(duration_histogram as fn() -> Histogram);
        Metrics {
            invocations: Family::default(),
            invocation_duration: histograms(),
            queue_duration: histograms(),
            instantiate_duration: histograms(),
            execute_duration: histograms(),
            kernel_launches: Family::default(),
            function_in_flight: Family::default(),
            function_queued: Family::default(),
            time_to_first_token: histograms(),
            time_per_output_token: histograms(),
            batch_size: Histograms::new_with_constructor(batch_histogram as fn() -> Histogram),
            series: Mutex::new(HashMap::new()),
            stats: StatsTable::default(),
        }
    }
}

/// One invocation counted in a gauge while alive: queued, then (after
/// [`GaugeGuard::running`]) in flight.
pub(crate) struct GaugeGuard {
    gauge: Gauge,
    next: Option<Gauge>,
}

impl GaugeGuard {
    fn inc(gauge: Gauge, next: Option<Gauge>) -> GaugeGuard {
        gauge.inc();
        GaugeGuard { gauge, next }
    }

    /// The invocation starts running: it leaves the queued gauge for the in-flight one.
    pub(crate) fn running(mut self) -> GaugeGuard {
        match self.next.take() {
            Some(next) => GaugeGuard::inc(next, None),
            None => self,
        }
    }
}

impl super::batcher::Progress for GaugeGuard {
    fn started(self: Box<Self>) -> Box<dyn super::batcher::Progress> {
        Box::new(self.running())
    }
}

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

impl Metrics {
    /// Records a successful invocation of `tenant/function` that took `total` from
    /// admission to result.
    pub(crate) fn record_ok(&self, tenant: &str, function: &str, total: Duration, invocation: &Invocation) {
        let labels = FunctionLabels { tenant: tenant.to_owned(), function: function.to_owned() };
        let out = &invocation.output;
        self.invocation_duration.get_or_create(&labels).observe(total.as_secs_f64());
        self.queue_duration.get_or_create(&labels).observe(invocation.queue.as_secs_f64());
        self.instantiate_duration.get_or_create(&labels).observe(out.instantiate.as_secs_f64());
        self.execute_duration.get_or_create(&labels).observe(out.execute.as_secs_f64());
        self.kernel_launches.get_or_create(&labels).inc_by(out.launches);
        if invocation.function.version.options.batching.is_some() || invocation.function.serves {
            self.batch_size.get_or_create(&labels).observe(f64::from(invocation.batch));
        }
        self.stats.record_ok(tenant, function, total, invocation.queue, out.instantiate + out.execute);
        self.count(labels, "ok");
    }

    /// Records a successful streaming invocation's time from admission to its first chunk
    /// and, with two chunks or more, its mean gap between chunks.
    pub(crate) fn record_chunks(&self, tenant: &str, function: &str, first: Duration, gap: Option<Duration>) {
        let labels = FunctionLabels { tenant: tenant.to_owned(), function: function.to_owned() };
        self.time_to_first_token.get_or_create(&labels).observe(first.as_secs_f64());
        if let Some(gap) = gap {
            self.time_per_output_token.get_or_create(&labels).observe(gap.as_secs_f64());
        }
        self.stats.record_chunks(tenant, function, first, gap);
    }

    /// Counts one invocation of `tenant/function` as queued until the guard is dropped
    /// or [`GaugeGuard::running`] moves it to in flight.
    pub(crate) fn queued(&self, tenant: &str, function: &str) -> GaugeGuard {
        let labels = FunctionLabels { tenant: tenant.to_owned(), function: function.to_owned() };
        let running = self.function_in_flight.get_or_create(&labels).clone();
        GaugeGuard::inc(self.function_queued.get_or_create(&labels).clone(), Some(running))
    }

    /// Records a failed (or refused) invocation with the error's stable code.
    pub(crate) fn record_error(&self, tenant: &str, function: &str, code: Code, total: Duration) {
        self.stats.record_error(tenant, function, total);
        self.count(FunctionLabels { tenant: tenant.to_owned(), function: function.to_owned() }, code.as_str());
    }

    fn count(&self, labels: FunctionLabels, outcome: &'static str) {
        let FunctionLabels { tenant, function } = labels;
        let labels = OutcomeLabels { tenant, function, outcome };
        if let Some(counter) = self.invocations.get(&labels) {
            counter.inc();
            return;
        }
        let mut series = self.series.lock();
        series.entry(labels.tenant.clone()).or_default().insert((labels.function.clone(), outcome));
        self.invocations.get_or_create(&labels).inc();
    }

    /// Drops the series of one function of `tenant`, or of all its functions (`None`),
    /// after a delete.
    pub(crate) fn forget(&self, tenant: &str, function: Option<&str>) {
        self.stats.forget(tenant, function);
        let removed: Vec<(String, &'static str)> = {
            let mut series = self.series.lock();
            match (function, series.get_mut(tenant)) {
                (_, None) => return,
                (None, Some(_)) => series.remove(tenant).unwrap_or_default().into_iter().collect(),
                (Some(f), Some(set)) => {
                    let gone: Vec<_> = set.iter().filter(|(name, _)| name == f).cloned().collect();
                    set.retain(|(name, _)| name != f);
                    gone
                }
            }
        };
        for (function, outcome) in removed {
            let labels = FunctionLabels { tenant: tenant.to_owned(), function };
            let histograms = [&self.invocation_duration, &self.queue_duration, &self.instantiate_duration];
            let streaming = [&self.execute_duration, &self.time_to_first_token, &self.time_per_output_token];
            self.batch_size.remove(&labels);
            for family in histograms.into_iter().chain(streaming) {
                family.remove(&labels);
            }
            self.kernel_launches.remove(&labels);
            self.function_in_flight.remove(&labels);
            self.function_queued.remove(&labels);
            let FunctionLabels { tenant, function } = labels;
            self.invocations.remove(&OutcomeLabels { tenant, function, outcome });
        }
    }

    /// The metrics text: these families plus the scrape-time ones from `status` (taken
    /// with the admin's view, so every tenant is in it).
    pub fn render(&self, status: &Status) -> String {
        let mut r = Registry::with_prefix("sluice");
        r.register("invocations", "Invocations by outcome: ok or the error code", self.invocations.clone());
        r.register_with_unit(
            "invocation_duration",
            "Successful invocations, admission to result",
            Unit::Seconds,
            self.invocation_duration.clone(),
        );
        let histograms = [
            ("queue_duration", "Admission to the start of instantiation", &self.queue_duration),
            ("instantiate_duration", "Creating the store and instance", &self.instantiate_duration),
            ("execute_duration", "The guest's run, including waits for the device", &self.execute_duration),
        ];
        for (name, help, family) in histograms {
            r.register_with_unit(name, help, Unit::Seconds, family.clone());
        }
        r.register("kernel_launches", "Ops launched by successful invocations", self.kernel_launches.clone());
        let help = "Requests that shared a successful request's invocation (batching and serving functions)";
        r.register("batch_size", help, self.batch_size.clone());
        r.register("function_in_flight", "Invocations of a function running now", self.function_in_flight.clone());
        let help = "Invocations of a function admitted and waiting for a guest thread";
        r.register("function_queued", help, self.function_queued.clone());
        let streaming = [
            ("time_to_first_token", "Streaming invocations, admission to the first chunk", &self.time_to_first_token),
            ("time_per_output_token", "Streaming invocations, mean gap between chunks", &self.time_per_output_token),
        ];
        for (name, help, family) in streaming {
            r.register_with_unit(name, help, Unit::Seconds, family.clone());
        }

        let loaded = Gauge::<u64, AtomicU64>::default();
        loaded.set(status.functions_loaded as u64);
        r.register("functions_loaded", "Functions loaded and serving", loaded);
        let compilations = Counter::<u64>::default();
        compilations.inc_by(status.compilations);
        r.register("compilations", "Components compiled by this process", compilations);
        let yields = Counter::<u64>::default();
        yields.inc_by(status.batch_guest_yields);
        r.register("batch_guest_yields", "Times batch-class guests yielded their core at an epoch tick", yields);
        let pauses = Counter::<u64>::default();
        pauses.inc_by(status.batch_guest_pauses);
        r.register(
            "batch_guest_pauses",
            "Times batch-class guests paused while latency work needed their core",
            pauses,
        );
        let in_flight = Gauge::<u64, AtomicU64>::default();
        in_flight.set(status.in_flight);
        r.register("in_flight", "Invocations running now", in_flight);

        // The instance pool (`engine::pool`): slots by kind, warm instances kept.
        let pool = &status.instance_pool;
        let slots = [
            ("component_instances", pool.component_instances, pool.component_instances_capacity),
            ("core_instances", pool.core_instances, pool.core_instances_capacity),
            ("memories", pool.memories, pool.memories_capacity),
            ("tables", pool.tables, pool.tables_capacity),
        ];
        let used = slots.iter().map(|&(kind, used, _)| (SlotLabels { kind }, used));
        gauge(&mut r, "instance_pool_slots_used", "Slots of the instance pool held (in flight and warm)", None, used);
        let capacity = slots.iter().map(|&(kind, _, cap)| (SlotLabels { kind }, u64::from(cap)));
        gauge(&mut r, "instance_pool_slots_capacity", "Slots of the instance pool", None, capacity);
        let warm = Gauge::<u64, AtomicU64>::default();
        warm.set(pool.warm_instances as u64);
        r.register("warm_instances", "Warm instances kept for the next invocations", warm);
        let warm_memory = Gauge::<u64, AtomicU64>::default();
        warm_memory.set(pool.warm_memory_bytes);
        let help = "Linear memory the warm instances hold";
        r.register_with_unit("warm_memory", help, Unit::Bytes, warm_memory);
        let metadata = Gauge::<u64, AtomicU64>::default();
        metadata.set(status.artifact_metadata_bytes);
        let help = "Host memory of the parsed metadata of loaded GGUF artifacts";
        r.register_with_unit("artifact_metadata", help, Unit::Bytes, metadata);

        let devices = || status.devices.iter().enumerate().map(|(i, d)| (DeviceLabels { device: i.to_string() }, d));
        let per_device = |f: fn(&crate::scheduler::DeviceStatus) -> u64| devices().map(move |(l, d)| (l, f(d)));
        gauge(&mut r, "device_queued", "Kernels and uploads waiting", None, per_device(|d| d.queued as u64));
        let active = per_device(|d| d.active_invocations as u64);
        gauge(&mut r, "device_active_invocations", "Invocations with an open stream", None, active);
        let resident = per_device(|d| d.resident_bytes);
        gauge(&mut r, "device_resident", "Device memory held by resident tensors", Some(Unit::Bytes), resident);
        counter(&mut r, "device_kernels", "Kernels run (a sliced kernel counts once)", per_device(|d| d.kernels));
        seconds(&mut r, "device_busy", "Device time spent in kernels", per_device(|d| d.busy_us));
        let help = "Times latency work was picked while best-effort work waited";
        counter(&mut r, "device_preemptions", help, per_device(|d| d.preemptions));
        counter(&mut r, "device_sliced_kernels", "Best-effort kernels run in slices", per_device(|d| d.sliced_kernels));
        let healthy = per_device(|d| u64::from(d.health == crate::scheduler::DeviceHealth::Healthy));
        gauge(&mut r, "device_healthy", "Whether the device serves (1) or has stopped (0)", None, healthy);
        let help = "Backend panics contained: each failed one command, the device kept serving";
        counter(&mut r, "device_contained_faults", help, per_device(|d| d.contained_faults));
        let help = "Times the device was lost (a sticky GPU error) and reset; its work in flight failed";
        counter(&mut r, "device_resets", help, per_device(|d| d.resets));
        let tenant_time = devices().flat_map(|(l, d)| {
            d.tenants.iter().map(move |t| {
                let class = match t.class {
                    PriorityClass::Latency => "latency",
                    PriorityClass::Batch => "batch",
                };
                let labels = DeviceTenantLabels { device: l.device.clone(), tenant: t.tenant.clone(), class };
                (labels, t.device_time_us)
            })
        });
        seconds(&mut r, "tenant_device", "Measured device time of a tenant's kernels", tenant_time);

        let tenants = || status.tenants.iter().map(|t| (TenantLabels { tenant: t.tenant.clone() }, t));
        let used = tenants().map(|(l, t)| (l, t.memory_used_bytes));
        gauge(&mut r, "tenant_memory_used", "Device memory a tenant holds", Some(Unit::Bytes), used);
        let quota = tenants().filter_map(|(l, t)| Some((l, t.memory_quota_bytes?)));
        gauge(&mut r, "tenant_memory_quota", "A tenant's device-memory quota", Some(Unit::Bytes), quota);
        let placed = tenants().map(|(l, t)| (l, t.weights_placed_bytes));
        let help = "Artifact bytes a tenant's loaded versions placed on devices";
        gauge(&mut r, "tenant_weights_placed", help, Some(Unit::Bytes), placed);
        let old = tenants().map(|(l, t)| (l, t.old_versions_loaded as u64));
        gauge(&mut r, "tenant_old_versions_loaded", "Non-serving versions a tenant keeps loaded", None, old);

        // Watching: what status calls and live feeds cost, and what was refused.
        let help = "Status snapshots a device's scheduler computed (shared by every caller)";
        counter(&mut r, "device_status_computations", help, per_device(|d| d.status_computations));
        let w = &status.watching;
        let feeds = w.live_feeds_open.iter().map(|f| (TenantLabels { tenant: f.tenant.clone() }, u64::from(f.open)));
        gauge(&mut r, "tenant_live_feeds_open", "Live feeds a tenant has open", None, feeds);
        let refusals = [
            ("status_requests_refused", "Status calls refused by a tenant's rate limit (429)", w.status_refused),
            ("live_feeds_refused", "Live feeds refused by a tenant's limit (429)", w.live_feeds_refused),
        ];
        for (name, help, total) in refusals {
            let c = Counter::<u64>::default();
            c.inc_by(total.unwrap_or(0));
            r.register(name, help, c);
        }

        // Host memory of requests and streams, per tenant; the streams' server-wide figures.
        let h = &status.host_memory;
        let per_tenant = |f: fn(&super::TenantHostMemory) -> u64| {
            h.tenants.iter().map(move |t| (TenantLabels { tenant: t.tenant.clone() }, f(t)))
        };
        let help = "Host memory a tenant's requests hold (bodies, decoded inputs, encoded responses)";
        gauge(&mut r, "tenant_host_memory_used", help, Some(Unit::Bytes), per_tenant(|t| t.used_bytes));
        let help = "Bytes a tenant's streamed invocations have queued towards their clients";
        gauge(&mut r, "tenant_stream_queued", help, Some(Unit::Bytes), per_tenant(|t| t.stream_queued_bytes));
        let help = "Requests refused for host memory (413 decoded_too_large, 429 host_memory_budget)";
        counter(&mut r, "tenant_host_memory_refused", help, per_tenant(|t| t.refused));
        let peak = Gauge::<u64, AtomicU64>::default();
        peak.set(h.stream_queue_peak_bytes.unwrap_or(0));
        let help = "The most bytes one streamed invocation had queued at once";
        r.register_with_unit("stream_queue_peak", help, Unit::Bytes, peak);
        let stalls = Counter::<u64>::default();
        stalls.inc_by(h.stream_stalls.unwrap_or(0));
        r.register("stream_stalls", "Streamed invocations cancelled: their client read nothing", stalls);
        let warm = tenants().map(|(l, t)| (l, t.warm_instances as u64));
        gauge(&mut r, "tenant_warm_instances", "Warm instances a tenant's functions keep", None, warm);
        let warm_memory = tenants().map(|(l, t)| (l, t.warm_memory_bytes));
        let help = "Linear memory a tenant's warm instances hold";
        gauge(&mut r, "tenant_warm_memory", help, Some(Unit::Bytes), warm_memory);
        let disk = tenants().map(|(l, t)| (l, t.disk_used_bytes));
        gauge(&mut r, "tenant_disk_used", "Bytes of the blobs a tenant's versions reference", Some(Unit::Bytes), disk);
        let disk_quota = tenants().filter_map(|(l, t)| Some((l, t.disk_quota_bytes?)));
        gauge(&mut r, "tenant_disk_quota", "A tenant's disk quota", Some(Unit::Bytes), disk_quota);
        let uploads = tenants().map(|(l, t)| (l, u64::from(t.uploads_in_flight)));
        gauge(&mut r, "tenant_uploads_in_flight", "A tenant's artifact uploads in flight", None, uploads);
        let upload_limit = tenants().map(|(l, t)| (l, u64::from(t.upload_limit)));
        gauge(&mut r, "tenant_upload_limit", "A tenant's most artifact uploads in flight", None, upload_limit);

        let mut out = String::new();
        text::encode(&mut out, &r).expect("writing to a String cannot fail");
        out
    }
}

/// Registers a scrape-time family of gauges.
fn gauge<S>(r: &mut Registry, name: &str, help: &str, unit: Option<Unit>, samples: impl IntoIterator<Item = (S, u64)>)
where
    S: Labels,
{
    let family = Family::<S, Gauge<u64, AtomicU64>>::default();
    for (labels, v) in samples {
        family.get_or_create(&labels).set(v);
    }
    register(r, name, help, unit, family);
}

/// Registers a scrape-time family of counters, read from totals the platform keeps.
fn counter<S: Labels>(r: &mut Registry, name: &str, help: &str, samples: impl IntoIterator<Item = (S, u64)>) {
    let family = Family::<S, Counter>::default();
    for (labels, v) in samples {
        family.get_or_create(&labels).inc_by(v);
    }
    r.register(name, help, family);
}

/// Registers a scrape-time family of counters of seconds, from totals in microseconds.
fn seconds<S: Labels>(r: &mut Registry, name: &str, help: &str, samples: impl IntoIterator<Item = (S, u64)>) {
    let family = Family::<S, Counter<f64, AtomicU64>>::default();
    for (labels, us) in samples {
        family.get_or_create(&labels).inc_by(us as f64 / 1e6);
    }
    r.register_with_unit(name, help, Unit::Seconds, family);
}

fn register(r: &mut Registry, name: &str, help: &str, unit: Option<Unit>, metric: impl Metric) {
    match unit {
        Some(unit) => r.register_with_unit(name, help, unit, metric),
        None => r.register(name, help, metric),
    }
}

/// A label set of a scrape-time family.
trait Labels: Clone + Hash + Eq + EncodeLabelSet + Debug + Send + Sync + 'static {}
impl<T: Clone + Hash + Eq + EncodeLabelSet + Debug + Send + Sync + 'static> Labels for T {}
