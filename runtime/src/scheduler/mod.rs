//! The per-device scheduler: the single dispatch point of every kernel.
//!
//! Each device gets one [`DeviceQueue`]: a handle that engine code on any thread uses
//! to submit work, and one actor thread that owns the device, every tensor's buffer
//! on it and the queues of pending work. Nothing else touches a device. The host
//! side of an op launch only validates the op, allocates a [`TensorId`] and sends a
//! message, so launches are asynchronous like CUDA: the output handle exists at
//! once, and only a read waits for the device.
//!
//! Work is queued per invocation and runs in submission order within it. Between
//! invocations the [`Policy`] decides: strict priority of latency over batch work,
//! weighted fair sharing of measured device time between tenants within a class,
//! and slicing of large best-effort kernels while latency work is active, so that
//! latency work waits at most about one [`SchedulerConfig::preemption_budget`].
//!
//! Every time the scheduler measures comes from [`SchedulerConfig::clock`], so tests
//! on a simulated device and clock ([`crate::device::sim`]) see the same decisions on
//! any machine. The engine holds a [`TensorLease`] per tensor; dropping it frees the
//! tensor here.

mod cost;
mod inflight;
mod kernels;
mod lease;
mod memory;
mod pool;
mod queues;
mod room;
mod snapshot;
mod status;
mod tensors;
mod work;
mod worker;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crossbeam_channel::Sender;
use sluice_host_api::{ApiError, Op, TensorMeta};
use tokio::sync::oneshot;

use crate::device::{Device, DeviceInfo, ScratchFn};
use work::Work;

pub use crate::clock::Clock;
pub use cost::{CostModel, KernelKey};
pub use kernels::{DEFAULT_KERNEL_LOG, FEED_BATCH, KernelBatch, KernelRecord, KernelWatch, RUNTIME_TENANT};
pub use lease::{FreeBatch, TensorLease};
pub use memory::{MemoryAccount, Reservation};
pub use pool::{DevicePool, Placement, PlacementError};
pub use room::QueueRoom;
pub use status::{DeviceHealth, DeviceStatus, LatencySummary, TenantStatus};

/// Names one tensor on one device. Never reused within a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(pub u64);

/// Names one invocation's stream of work on one device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct InvocationId(pub u64);

impl InvocationId {
    /// The runtime's own work (shared weight uploads): runs before anything else and
    /// is never cancelled.
    pub const SYSTEM: InvocationId = InvocationId(0);
}

/// Priority class of a function, set at deploy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PriorityClass {
    /// Latency-critical: always runs before batch work.
    #[default]
    Latency,
    /// Best-effort: fills the device when latency work leaves room.
    Batch,
}

/// Who an invocation's work belongs to.
#[derive(Clone, Debug)]
pub struct SchedulingInfo {
    pub tenant: Arc<str>,
    /// The function invoked (named in the kernel log).
    pub function: Arc<str>,
    pub class: PriorityClass,
    /// The tenant's weight in fair sharing (≥ 1).
    pub weight: u32,
}

/// How the scheduler orders work between invocations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// Arrival order, no classes, no slicing: the baseline.
    Fifo,
    /// Strict priority between classes, weighted fair share within, preemption of
    /// best-effort work at kernel boundaries (and by slicing).
    Priority,
}

/// Scheduler settings of one device.
#[derive(Clone, Debug)]
pub struct SchedulerConfig {
    pub policy: Policy,
    /// While latency work is active, no best-effort kernel estimated longer than this
    /// runs whole (it is sliced into pieces that fit), and on an asynchronous device
    /// no more best-effort work than this is in flight.
    pub preemption_budget: Duration,
    /// Best-effort work an asynchronous device may hold in flight while no latency
    /// work is active (deeper queues keep it busy; latency work arriving then waits
    /// at most this long).
    pub fill_depth: Duration,
    /// How long after the last latency-class invocation ended best-effort work stays
    /// preemptible (sliced, bounded by the budget) as if latency work were active, so
    /// the next request of a latency tenant with think time does not find a long
    /// best-effort kernel running. Off by default: slicing all the time costs
    /// best-effort throughput (on the CPU benchmark, 60 % → 18 % of solo with a 25 ms
    /// hold, for no gain in preemption latency there).
    pub latency_hold: Duration,
    /// Work items (uploads and launches) one invocation may have queued at once; a
    /// guest submitting more waits until the device has taken some (backpressure on
    /// that guest alone), so no invocation builds a queue others wait behind.
    pub max_queued_per_invocation: usize,
    /// The same bound for a batch-class invocation: lower, because every item queued
    /// is also a command that a latency invocation's next command may wait behind in
    /// the device thread's intake, which runs in arrival order before priorities apply.
    pub max_queued_per_batch_invocation: usize,
    /// Device memory kept free of tensor reservations (for the backend's scratch,
    /// its own state and the process). Every tensor on the device is reserved in
    /// the device's account ([`DeviceQueue::memory`]), whose limit is the device's
    /// memory less this (less at most a quarter of it, on a small device).
    pub memory_headroom_bytes: u64,
    /// Kernel records the device keeps for live watchers ([`DeviceQueue::kernels`]),
    /// written only while one watches; 0 turns the log off.
    pub kernel_log: usize,
    /// How old a shared status snapshot ([`DeviceQueue::shared_status`]) may be before
    /// a caller asks the device's actor for a new one: the actor computes the status
    /// at most once per interval for all callers together.
    pub status_interval: Duration,
    /// Where the scheduler reads time: the monotonic clock, or a simulated one that
    /// only moves when told (tests and benchmarks on [`crate::device::sim`]).
    pub clock: Clock,
}

/// Default of [`SchedulerConfig::max_queued_per_invocation`]: deep enough that a
/// model's launches run back to back (a MiniLM forward pass is a few hundred ops),
/// shallow enough that the work of every invocation on a device stays short.
pub const DEFAULT_MAX_QUEUED_PER_INVOCATION: usize = 256;

/// Default of [`SchedulerConfig::max_queued_per_batch_invocation`]. Measured on two
/// cores beside eight batch invocations launching tiny ops without reading them (the
/// soak's `flood`): a latency tenant's p99 was 1.86 ms with 32, 2.57 ms with 256 (means
/// of five runs each), at 19 % less of the flood's own throughput.
pub const DEFAULT_MAX_QUEUED_PER_BATCH_INVOCATION: usize = 32;

/// Default of [`SchedulerConfig::status_interval`]: status endpoints, metrics scrapes
/// and live feeds cost the device's actor at most ten status computations a second,
/// however many callers there are.
pub const DEFAULT_STATUS_INTERVAL: Duration = Duration::from_millis(100);

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            policy: Policy::Priority,
            preemption_budget: Duration::from_micros(100),
            fill_depth: Duration::from_millis(2),
            latency_hold: Duration::ZERO,
            max_queued_per_invocation: DEFAULT_MAX_QUEUED_PER_INVOCATION,
            max_queued_per_batch_invocation: DEFAULT_MAX_QUEUED_PER_BATCH_INVOCATION,
            memory_headroom_bytes: 512 << 20,
            kernel_log: DEFAULT_KERNEL_LOG,
            status_interval: DEFAULT_STATUS_INTERVAL,
            clock: Clock::monotonic(),
        }
    }
}

/// A request to the device actor.
pub(crate) enum Command {
    Begin {
        inv: InvocationId,
        info: SchedulingInfo,
        room: Arc<QueueRoom>,
    },
    End {
        inv: InvocationId,
    },
    Work {
        inv: InvocationId,
        work: Work,
        /// When it was submitted, on the scheduler's clock.
        at: Duration,
    },
    Read {
        id: TensorId,
        meta: TensorMeta,
        reply: oneshot::Sender<Result<Vec<u8>, ApiError>>,
    },
    Free {
        id: TensorId,
    },
    /// Tensors freed together ([`FreeBatch`]).
    FreeMany {
        ids: Vec<TensorId>,
    },
    /// Host CPU time the invocation's guest computed, charged to its tenant's share.
    ChargeGuestCpu {
        inv: InvocationId,
        elapsed: Duration,
    },
    /// Answer once every kernel queued before has run.
    Status {
        reply: oneshot::Sender<DeviceStatus>,
    },
    /// The kernel log's newest `limit` records from sequence number `since` on.
    Kernels {
        since: u64,
        limit: usize,
        reply: oneshot::Sender<KernelBatch>,
    },
}

/// What the device thread publishes for placement decisions.
#[derive(Default)]
pub(crate) struct Published {
    /// Queued work items plus open invocations.
    pub load: AtomicU64,
    /// Bytes of resident tensors.
    pub resident_bytes: AtomicU64,
    /// Why the device thread stopped, once it has.
    pub failure: std::sync::Mutex<Option<String>>,
    /// Times the device was lost and reset: counted before the work it lost fails, so
    /// whoever sees that failure also sees the reset.
    pub resets: AtomicU64,
    /// The device was lost and could not be reset: it fails every work item.
    pub unrecoverable: std::sync::atomic::AtomicBool,
    /// Live watchers of the kernel log ([`KernelWatch`]): it records while any exist.
    pub kernel_watchers: Arc<std::sync::atomic::AtomicUsize>,
}

struct Shared {
    tx: Sender<Command>,
    published: Arc<Published>,
    info: DeviceInfo,
    config: SchedulerConfig,
    next_tensor: AtomicU64,
    next_invocation: AtomicU64,
    /// Every tensor reserved on the device, against its memory less the headroom.
    memory: Arc<MemoryAccount>,
    /// The device's scratch estimate, if it gives one.
    scratch: Option<ScratchFn>,
    /// The status snapshot every caller shares ([`DeviceQueue::shared_status`]).
    snapshots: snapshot::Snapshots,
}

/// Handle to one device's scheduler. Cheap to clone.
#[derive(Clone)]
pub struct DeviceQueue {
    shared: Arc<Shared>,
}

impl DeviceQueue {
    /// Starts the actor thread that owns `device`, with the default configuration.
    pub fn start(device: Box<dyn Device>) -> DeviceQueue {
        Self::start_with(device, SchedulerConfig::default())
    }

    /// Starts the actor thread that owns `device`.
    pub fn start_with(device: Box<dyn Device>, config: SchedulerConfig) -> DeviceQueue {
        let info = device.info();
        let scratch = device.scratch();
        let (tx, rx) = crossbeam_channel::unbounded();
        let name = format!("sluice-{:?}", info.kind).to_lowercase();
        let worker_config = config.clone();
        let published = Arc::new(Published::default());
        let worker_published = published.clone();
        std::thread::Builder::new()
            .name(name)
            .spawn(move || worker::run(device, worker_config, rx, worker_published))
            .expect("spawning the device thread");
        let headroom = config.memory_headroom_bytes.min(info.memory_bytes / 4);
        let memory = MemoryAccount::new(
            format!("the {} device's memory", info.name),
            Some(info.memory_bytes.saturating_sub(headroom)),
            None,
        );
        DeviceQueue {
            shared: Arc::new(Shared {
                memory,
                scratch,
                tx,
                published,
                info,
                config,
                next_tensor: AtomicU64::new(1),
                next_invocation: AtomicU64::new(1),
                snapshots: Default::default(),
            }),
        }
    }

    /// What the device is.
    pub fn info(&self) -> &DeviceInfo {
        &self.shared.info
    }

    /// The scheduler's settings.
    pub fn config(&self) -> &SchedulerConfig {
        &self.shared.config
    }

    /// The device-wide memory account: every tensor's reservation, whoever's.
    pub fn memory(&self) -> &Arc<MemoryAccount> {
        &self.shared.memory
    }

    /// A fresh tensor id.
    pub fn new_tensor_id(&self) -> TensorId {
        TensorId(self.shared.next_tensor.fetch_add(1, Ordering::Relaxed))
    }

    fn send(&self, command: Command) {
        // The actor only stops when every handle is gone, so a send cannot fail
        // while `self` exists.
        let _ = self.shared.tx.send(command);
    }

    /// Opens a stream of work for one invocation; dropping the guard ends it and
    /// cancels whatever it still has queued. Submitters wait for the guard's
    /// [`InvocationGuard::room`] before each upload or launch.
    pub fn begin(&self, info: SchedulingInfo) -> InvocationGuard {
        let inv = InvocationId(self.shared.next_invocation.fetch_add(1, Ordering::Relaxed));
        let config = &self.shared.config;
        let room = Arc::new(QueueRoom::new(match info.class {
            PriorityClass::Latency => config.max_queued_per_invocation,
            PriorityClass::Batch => config.max_queued_per_batch_invocation,
        }));
        self.send(Command::Begin { inv, info, room: room.clone() });
        InvocationGuard { inv, room, queue: self.clone() }
    }

    /// Queues an upload of `bytes` (exactly `meta.byte_len()`) as tensor `id`.
    pub fn upload(&self, inv: InvocationId, id: TensorId, meta: TensorMeta, bytes: Vec<u8>) {
        let at = self.shared.config.clock.now();
        self.send(Command::Work { inv, work: Work::Upload { id, meta, bytes }, at });
    }

    /// Queues `op` on `inputs`; its result becomes tensor `id` with metadata `out`.
    pub fn launch(
        &self,
        inv: InvocationId,
        id: TensorId,
        op: Op,
        inputs: Vec<(TensorId, TensorMeta)>,
        out: TensorMeta,
    ) {
        self.launch_charged(inv, id, op, inputs, out, None);
    }

    /// [`DeviceQueue::launch`], holding `scratch` (the kernel's scratch reserved for
    /// its invocation, [`DeviceQueue::scratch_bytes`]) until the kernel has run.
    pub fn launch_charged(
        &self,
        inv: InvocationId,
        id: TensorId,
        op: Op,
        inputs: Vec<(TensorId, TensorMeta)>,
        out: TensorMeta,
        scratch: Option<Reservation>,
    ) {
        let at = self.shared.config.clock.now();
        self.send(Command::Work { inv, work: Work::Launch { id, op, inputs, out, scratch }, at });
    }

    /// Scratch and temporaries the device allocates running `op` on `inputs` (besides
    /// its output), as its backend estimates them ([`Device::scratch`]); 0 if it does
    /// not say.
    pub fn scratch_bytes(&self, op: &Op, inputs: &[&TensorMeta], out: &TensorMeta) -> u64 {
        self.shared.scratch.map_or(0, |f| f(op, inputs, out, self.shared.info.compute_units))
    }

    /// Waits for tensor `id` and returns its little-endian bytes.
    pub async fn read(&self, id: TensorId, meta: TensorMeta) -> Result<Vec<u8>, ApiError> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Read { id, meta, reply });
        rx.await.unwrap_or_else(|_| Err(device_gone()))
    }

    /// Blocking variant of [`DeviceQueue::read`], for threads outside the async runtime.
    pub fn read_blocking(&self, id: TensorId, meta: TensorMeta) -> Result<Vec<u8>, ApiError> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Read { id, meta, reply });
        rx.blocking_recv().unwrap_or_else(|_| Err(device_gone()))
    }

    /// Charges `elapsed` of host CPU time, which the invocation's guest spent
    /// computing between host calls, to its tenant's fair share, as if it were device
    /// time: a tenant burning the host's cores yields device time to the others.
    pub fn charge_guest_cpu(&self, inv: InvocationId, elapsed: Duration) {
        self.send(Command::ChargeGuestCpu { inv, elapsed });
    }

    /// Releases tensor `id` once no queued kernel needs it.
    pub fn free(&self, id: TensorId) {
        self.send(Command::Free { id });
    }

    /// Releases tensors `ids` (in one message) once no queued kernel needs them.
    pub fn free_many(&self, ids: Vec<TensorId>) {
        if !ids.is_empty() {
            self.send(Command::FreeMany { ids });
        }
    }

    /// Whether `self` and `other` are handles of the same device's scheduler.
    pub fn same_queue(&self, other: &DeviceQueue) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// The status, taken after the commands sent before. Never fails: a device whose
    /// thread has stopped reports [`DeviceHealth::Failed`] with the reason.
    pub async fn status(&self) -> DeviceStatus {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Status { reply });
        rx.await.unwrap_or_else(|_| self.failed_status())
    }

    /// Starts watching the device's kernels: while the returned guard (or another)
    /// lives, the device records each kernel it runs in its log, which
    /// [`DeviceQueue::kernels`] reads.
    pub fn watch_kernels(&self) -> KernelWatch {
        KernelWatch::new(self.shared.published.kernel_watchers.clone())
    }

    /// The kernel log's newest `limit` records from sequence number `since` on (0:
    /// all it keeps), taken after the commands sent before; older ones since `since`
    /// count as missed. Empty for a stopped device.
    pub async fn kernels(&self, since: u64, limit: usize) -> KernelBatch {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Kernels { since, limit, reply });
        rx.await.unwrap_or_default()
    }

    /// Blocking variant of [`DeviceQueue::kernels`].
    pub fn kernels_blocking(&self, since: u64, limit: usize) -> KernelBatch {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Kernels { since, limit, reply });
        rx.blocking_recv().unwrap_or_default()
    }

    /// Blocking variant of [`DeviceQueue::status`].
    pub fn status_blocking(&self) -> DeviceStatus {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Status { reply });
        rx.blocking_recv().unwrap_or_else(|_| self.failed_status())
    }

    /// Times the device was lost and reset: copies of data on it made before the
    /// count changed (cached weights) are gone and must be uploaded again.
    pub fn resets(&self) -> u64 {
        self.shared.published.resets.load(Ordering::Acquire)
    }

    /// Bytes of the device's resident tensors as the device thread last published them
    /// (after each scheduling step; no round trip, so possibly a step old: the status
    /// has the exact figure).
    pub fn resident_bytes(&self) -> u64 {
        self.shared.published.resident_bytes.load(Ordering::Relaxed)
    }

    /// Whether the device runs work: not stopped, and not lost for good (see
    /// [`DeviceHealth`]). Placement passes over a device that does not.
    pub fn serves(&self) -> bool {
        !self.shared.published.unrecoverable.load(Ordering::Acquire) && self.failure().is_none()
    }

    /// Why the device thread stopped, if it has (a panic of the scheduler itself;
    /// backend panics are contained and fail one command each).
    pub fn failure(&self) -> Option<String> {
        self.shared.published.failure.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn failed_status(&self) -> DeviceStatus {
        let why = self.failure().unwrap_or_else(|| "the device thread has stopped".into());
        let config = &self.shared.config;
        DeviceStatus::failed(self.shared.info.clone(), config.policy, config.preemption_budget.as_micros() as u64, why)
    }
}

/// An open invocation on a device; ends it when dropped.
pub struct InvocationGuard {
    inv: InvocationId,
    room: Arc<QueueRoom>,
    queue: DeviceQueue,
}

impl InvocationGuard {
    pub fn id(&self) -> InvocationId {
        self.inv
    }

    /// The invocation's room in the device queue: wait on it before each submission.
    pub fn room(&self) -> &Arc<QueueRoom> {
        &self.room
    }
}

impl Drop for InvocationGuard {
    fn drop(&mut self) {
        self.queue.send(Command::End { inv: self.inv });
    }
}

fn device_gone() -> ApiError {
    ApiError::new(sluice_host_api::ErrorCode::DeviceFailure, "the device thread has stopped")
}
