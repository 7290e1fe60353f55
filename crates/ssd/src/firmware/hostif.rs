//! The host interface: submission queues of bounded depth and the host link.
//!
//! Each reactor (host core) has its own I/O queue pair, as NVMe drivers give every core one and
//! SPDK every thread one, so reactors never share a queue slot. A command submitted while
//! `queue_depth` commands of its queue are in flight starts when the earliest of them
//! completes (commands are served in order of arrival). The controller then processes the
//! command for `command_ns`, one command at a time across all queues: its own timeline, so
//! `command_ns` is both a latency and a ceiling of `1 / command_ns` commands per second (the
//! controller limit a datasheet's peak 4 KiB IOPS rating measures). Data crosses the link
//! (PCIe) at `host_mb_per_s`, one timeline per direction since the link is full duplex.

use std::collections::VecDeque;

/// Completion times in ascending order. Commands mostly complete in the order they were
/// submitted, so inserting from the back is usually O(1); this beat a binary heap on the
/// simulator's hot path (`flashrig bench ssd`).
#[derive(Default)]
pub struct Times(VecDeque<u64>);

impl Times {
    pub fn push(&mut self, t: u64) {
        let mut i = self.0.len();
        while i > 0 && self.0[i - 1] > t {
            i -= 1;
        }
        self.0.insert(i, t);
    }
    pub fn earliest(&self) -> Option<u64> {
        self.0.front().copied()
    }
    pub fn pop_earliest(&mut self) -> Option<u64> {
        self.0.pop_front()
    }
    /// Drops every time at or before `t`.
    pub fn drop_until(&mut self, t: u64) {
        while self.0.front().is_some_and(|&d| d <= t) {
            self.0.pop_front();
        }
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn clear(&mut self) {
        self.0.clear();
    }
}

/// A throughput cap in one direction (`firmware.host_read_mb_per_s`, `host_write_mb_per_s`):
/// data passes it one command after another at the capped rate, like a second, slower link.
#[derive(Default)]
struct Cap {
    /// Picoseconds per byte; 0 leaves the direction uncapped.
    ps_per_byte: u64,
    free_ns: u64,
}

impl Cap {
    fn new(mb_per_s: f64) -> Cap {
        Cap {
            ps_per_byte: if mb_per_s > 0.0 { (1e6 / mb_per_s).round() as u64 } else { 0 },
            free_ns: 0,
        }
    }

    /// Data that would be through at `done_ns` uncapped, whose transfer could start at
    /// `t_ns`: when it is through the cap.
    fn pass(&mut self, t_ns: u64, done_ns: u64, bytes: usize) -> u64 {
        if self.ps_per_byte == 0 {
            return done_ns;
        }
        let start = t_ns.max(self.free_ns);
        self.free_ns = start + (bytes as u64 * self.ps_per_byte).div_ceil(1000);
        done_ns.max(self.free_ns)
    }
}

pub struct HostIf {
    depth: usize,
    /// Completion times of the commands in flight, per I/O queue (reactor).
    queues: Vec<Times>,
    /// The queue of the command being processed (set by `admit`, used by `complete`; the
    /// controller handles one command at a time).
    current: usize,
    ps_per_byte: u64,
    to_device_free_ns: u64,
    to_host_free_ns: u64,
    /// When the controller is next free to process a command.
    controller_free_ns: u64,
    pub command_ns: u64,
    /// Commands that had to wait for a queue slot.
    pub queue_waits: u64,
    read_cap: Cap,
    write_cap: Cap,
}

impl HostIf {
    pub fn new(depth: u32, host_mb_per_s: f64, command_ns: u64) -> HostIf {
        HostIf {
            depth: depth as usize,
            queues: vec![Times::default()],
            current: 0,
            ps_per_byte: if host_mb_per_s > 0.0 { (1e6 / host_mb_per_s).round() as u64 } else { 0 },
            to_device_free_ns: 0,
            to_host_free_ns: 0,
            controller_free_ns: 0,
            command_ns,
            queue_waits: 0,
            read_cap: Cap::default(),
            write_cap: Cap::default(),
        }
    }

    /// Caps the data rate of reads and of writes (MB/s, 0: uncapped) on top of the link.
    pub fn with_caps(mut self, read_mb_per_s: f64, write_mb_per_s: f64) -> HostIf {
        self.read_cap = Cap::new(read_mb_per_s);
        self.write_cap = Cap::new(write_mb_per_s);
        self
    }

    /// When a command arriving at `t_ns` on the calling reactor's queue starts (after its
    /// queue slot and its controller time, which commands take in turn).
    pub fn admit(&mut self, t_ns: u64) -> u64 {
        let q =
            if flashrig_runtime::in_runtime() { flashrig_runtime::current_reactor() } else { 0 };
        if self.queues.len() <= q {
            self.queues.resize_with(q + 1, Times::default);
        }
        self.current = q;
        let in_flight = &mut self.queues[q];
        in_flight.drop_until(t_ns);
        let mut start = t_ns;
        if in_flight.len() >= self.depth {
            let d = in_flight.pop_earliest().expect("queue is full, so not empty");
            start = start.max(d);
            self.queue_waits += 1;
        }
        if self.command_ns == 0 {
            return start;
        }
        self.controller_free_ns = start.max(self.controller_free_ns) + self.command_ns;
        self.controller_free_ns
    }

    /// Records a command's completion time (it holds its queue slot until then).
    pub fn complete(&mut self, done_ns: u64) {
        self.queues[self.current].push(done_ns);
    }

    fn xfer_ns(&self, bytes: usize) -> u64 {
        (bytes as u64 * self.ps_per_byte).div_ceil(1000)
    }

    /// Moves write data to the device from `t_ns`; returns when it has arrived.
    pub fn to_device(&mut self, t_ns: u64, bytes: usize) -> u64 {
        let start = t_ns.max(self.to_device_free_ns);
        self.to_device_free_ns = start + self.xfer_ns(bytes);
        self.write_cap.pass(t_ns, self.to_device_free_ns, bytes)
    }

    /// Moves read data to the host from `t_ns`; returns when it has arrived.
    pub fn to_host(&mut self, t_ns: u64, bytes: usize) -> u64 {
        let start = t_ns.max(self.to_host_free_ns);
        self.to_host_free_ns = start + self.xfer_ns(bytes);
        self.read_cap.pass(t_ns, self.to_host_free_ns, bytes)
    }

    /// Power loss: nothing is in flight any more.
    pub fn reset(&mut self, t_ns: u64) {
        self.queues.iter_mut().for_each(Times::clear);
        self.to_device_free_ns = t_ns;
        self.to_host_free_ns = t_ns;
        self.controller_free_ns = t_ns;
        self.read_cap.free_ns = t_ns;
        self.write_cap.free_ns = t_ns;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_stay_sorted() {
        let mut t = Times::default();
        for x in [5, 3, 9, 9, 1, 7] {
            t.push(x);
        }
        t.drop_until(3);
        assert_eq!(t.earliest(), Some(5));
        let rest: Vec<u64> = std::iter::from_fn(|| t.pop_earliest()).collect();
        assert_eq!(rest, vec![5, 7, 9, 9]);
        assert!(t.is_empty());
    }

    #[test]
    fn a_full_queue_delays_the_next_command() {
        let mut h = HostIf::new(2, 1000.0, 5);
        assert_eq!(h.admit(0), 5);
        h.complete(100);
        // The controller processes one command at a time: the second waits for the first.
        assert_eq!(h.admit(0), 10);
        h.complete(50);
        // Two in flight: the third starts when the earlier (50) completes.
        assert_eq!(h.admit(10), 55);
        assert_eq!(h.queue_waits, 1);
        // 1000 MB/s = 1 byte per ns; the link is shared in each direction.
        assert_eq!(h.to_device(0, 100), 100);
        assert_eq!(h.to_device(0, 100), 200);
        assert_eq!(h.to_host(0, 100), 100);
    }

    #[test]
    fn caps_bound_each_direction_on_their_own() {
        // An instant link capped at 1000 MB/s for reads and 500 MB/s for writes: 1 and 2 ns
        // per byte, commands one after another.
        let mut h = HostIf::new(64, 0.0, 0).with_caps(1000.0, 500.0);
        assert_eq!(h.to_host(0, 100), 100);
        assert_eq!(h.to_host(0, 100), 200);
        assert_eq!(h.to_device(0, 100), 200);
        assert_eq!(h.to_device(1000, 100), 1200);
        // Uncapped, the link alone decides.
        let mut free = HostIf::new(64, 1000.0, 0);
        assert_eq!(free.to_device(0, 100), 100);
    }

    #[test]
    fn the_controller_bounds_commands_per_second() {
        // 1000 commands arriving at once on a deep queue: 1 us each takes 1 ms in all.
        let mut h = HostIf::new(4096, 0.0, 1000);
        let last = (0..1000).map(|_| h.admit(0)).max().unwrap();
        assert_eq!(last, 1_000_000);
        // An idle controller adds its time once.
        assert_eq!(h.admit(5_000_000), 5_001_000);
        let mut free = HostIf::new(4, 0.0, 0);
        assert_eq!(free.admit(7), 7);
    }
}
