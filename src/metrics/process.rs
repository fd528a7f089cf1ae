//! The process metrics every Prometheus client library exports (`process_*`), read from
//! `/proc/self` at the scrape; absent where `/proc` is not (they are then left out).

use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

pub(super) fn collect(r: &mut Registry) {
    // SAFETY-free libc calls: sysconf reads a constant.
    let page_bytes = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let ticks = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) })
        .unwrap_or(100)
        .max(1);
    if let Ok(statm) = std::fs::read_to_string("/proc/self/statm") {
        let mut fields = statm.split_whitespace().map(|f| f.parse::<u64>().unwrap_or(0));
        let (virtual_pages, resident_pages) = (fields.next().unwrap_or(0), fields.next().unwrap_or(0));
        r.register(
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes",
            ConstGauge::new((virtual_pages * page_bytes) as i64),
        );
        r.register(
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            ConstGauge::new((resident_pages * page_bytes) as i64),
        );
    }
    if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
        r.register(
            "process_open_fds",
            "Number of open file descriptors",
            ConstGauge::new(dir.count() as i64),
        );
    }
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        r.register(
            "process_max_fds",
            "Maximum number of open file descriptors",
            ConstGauge::new(i64::try_from(limit.rlim_cur).unwrap_or(i64::MAX)),
        );
    }
    if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
        // Fields after the command name (which may hold spaces, so split after its ')').
        if let Some(rest) = stat.rsplit_once(')').map(|(_, rest)| rest) {
            let fields: Vec<&str> = rest.split_whitespace().collect();
            // utime and stime are fields 14 and 15 of stat; `rest` starts at field 3.
            let cpu_ticks: u64 = [11, 12]
                .iter()
                .filter_map(|&i| fields.get(i).and_then(|f| f.parse::<u64>().ok()))
                .sum();
            r.register(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                ConstCounter::new(cpu_ticks as f64 / ticks as f64),
            );
            let threads = fields.get(17).and_then(|f| f.parse::<i64>().ok()).unwrap_or(0);
            r.register("process_threads", "Number of OS threads", ConstGauge::new(threads));
        }
    }
}
