//! The `sluice` command.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use sluice::Broker;
use sluice::config::BrokerConfig;

#[derive(Parser)]
#[command(
    name = "sluice",
    version,
    about = "A message broker that speaks the Apache Kafka protocol"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The node's configuration, as `serve` and `format` take it.
#[derive(clap::Args)]
struct NodeArgs {
    /// A YAML file of Kafka-named keys (see config.yaml).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Address to listen on, HOST:PORT (`listeners`).
    #[arg(long)]
    listen: Option<String>,
    /// Address clients are told to connect to, HOST:PORT (`advertised.listeners`).
    #[arg(long)]
    advertise: Option<String>,
    /// Data directory (`log.dirs`).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// This broker's id (`node.id`).
    #[arg(long)]
    node_id: Option<i32>,
    /// Override any key: --set num.partitions=3 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
}

#[derive(Subcommand)]
enum Command {
    /// Run a broker (embedded defaults unless --config is given).
    Serve {
        #[command(flatten)]
        node: NodeArgs,
    },
    /// Prepare a data directory, as Kafka's `kafka-storage format`: for a dynamic quorum
    /// (controller.quorum.bootstrap.servers, KIP-853) the voters its metadata log starts
    /// with, and SCRAM credentials to record at the next start (--add-scram).
    Format {
        #[command(flatten)]
        node: NodeArgs,
        /// This node alone is the first voter (a new quorum of one; add the others with
        /// AddRaftVoter).
        #[arg(long, conflicts_with_all = ["initial_controllers", "no_initial_controllers"])]
        standalone: bool,
        /// The first voters, ID@HOST:PORT,... (each one's controller listener; a Kafka-style
        /// `:DIRECTORY_ID` suffix is accepted and ignored).
        #[arg(long, conflicts_with = "no_initial_controllers")]
        initial_controllers: Option<String>,
        /// This node joins a quorum that exists (as an observer, until AddRaftVoter).
        #[arg(long)]
        no_initial_controllers: bool,
        /// A SCRAM credential the node records in the metadata log when it next starts, for
        /// users who must log in before any could create one (SCRAM between brokers):
        /// 'SCRAM-SHA-256=[name=USER,password=PASSWORD]', optionally with ',iterations=N'
        /// (repeatable). Stored salted, never the password.
        #[arg(long = "add-scram", value_name = "CREDENTIAL")]
        add_scram: Vec<String>,
    },
    /// Exit 0 when a broker at ADDRESS answers ApiVersions (for container health checks, where
    /// the image has no shell or client tools).
    Healthcheck {
        #[arg(default_value = "127.0.0.1:9092")]
        address: String,
    },
    #[command(flatten)]
    Admin(sluice::cli::Command),
}

/// Sends ApiVersions v0 and checks the answer carries no error.
fn healthcheck(address: &str) -> Result<(), String> {
    use std::io::{Read, Write};
    use std::net::ToSocketAddrs;
    use std::time::Duration;
    let addr = address
        .to_socket_addrs()
        .map_err(|e| format!("{address}: {e}"))?
        .next()
        .ok_or("no address")?;
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    // length 10: api key 18, version 0, correlation id 1, client id "" (length 0)
    let request = [0, 0, 0, 10, 0, 18, 0, 0, 0, 0, 0, 1, 0, 0];
    stream.write_all(&request).map_err(|e| e.to_string())?;
    let mut head = [0u8; 10]; // length, correlation id, error code
    stream.read_exact(&mut head).map_err(|e| e.to_string())?;
    match i16::from_be_bytes([head[8], head[9]]) {
        0 => Ok(()),
        code => Err(format!("ApiVersions answered error {code}")),
    }
}

/// `sluice format`: SCRAM credentials for the next start, and (for a dynamic quorum, or when
/// asked) the voters its log starts with.
fn format(
    node: &NodeArgs,
    standalone: bool,
    initial_controllers: Option<&str>,
    no_initial_controllers: bool,
    add_scram: &[String],
) -> Result<String, String> {
    let config = build_config(node)?;
    let mut done = Vec::new();
    if !add_scram.is_empty() {
        let entries = add_scram
            .iter()
            .map(|arg| sluice::sasl::bootstrap::parse(arg))
            .collect::<Result<Vec<_>, String>>()?;
        sluice::sasl::bootstrap::write(&config.data_dir, &entries).map_err(|e| e.to_string())?;
        let users: Vec<String> = entries
            .iter()
            .map(|e| format!("{} ({})", e.user, e.mechanism))
            .collect();
        done.push(format!(
            "{}: SCRAM credentials for {} are recorded at the next start",
            config.data_dir.display(),
            users.join(", ")
        ));
        if !standalone && initial_controllers.is_none() && !no_initial_controllers {
            return Ok(done.join("\n"));
        }
    }
    done.push(format_voters(
        &config,
        standalone,
        initial_controllers,
        no_initial_controllers,
    )?);
    Ok(done.join("\n"))
}

/// `sluice format`'s voters: what a dynamic quorum's log starts with.
fn format_voters(
    config: &BrokerConfig,
    standalone: bool,
    initial_controllers: Option<&str>,
    no_initial_controllers: bool,
) -> Result<String, String> {
    if !config.dynamic_quorum() {
        return Err("format records voters for a dynamic quorum: set controller.quorum.bootstrap.servers (or give only --add-scram)".into());
    }
    if !config.process_roles.controller {
        return Err(
            "format is for controllers (process.roles includes controller); a broker-only node needs none".into(),
        );
    }
    let voters: std::collections::BTreeMap<u64, String> =
        match (standalone, initial_controllers, no_initial_controllers) {
            (true, _, _) => {
                let own = config
                    .controller_address()
                    .ok_or("--standalone: the node has no controller listener")?;
                [(config.node_id as u64, own)].into()
            }
            (_, Some(list), _) => {
                // Kafka's ID@HOST:PORT:DIRECTORY_ID entries: the directory id is dropped.
                let entries: Vec<String> = list
                    .split(',')
                    .map(
                        |entry| match entry.trim().splitn(3, ':').collect::<Vec<_>>().as_slice() {
                            [head, port, _directory] => format!("{head}:{port}"),
                            _ => entry.trim().to_string(),
                        },
                    )
                    .collect();
                let parsed = sluice::config::parse_voters("--initial-controllers", &entries.join(","))
                    .map_err(|e| e.to_string())?;
                if !parsed.contains_key(&config.node_id) {
                    return Err(format!(
                        "--initial-controllers does not list this node ({})",
                        config.node_id
                    ));
                }
                parsed.into_iter().map(|(id, address)| (id as u64, address)).collect()
            }
            (false, None, true) => Default::default(),
            (false, None, false) => {
                return Err("say --standalone, --initial-controllers or --no-initial-controllers".into());
            }
        };
    sluice::cluster::raft::format_voters(&config.data_dir, &voters).map_err(|e| e.to_string())?;
    Ok(match voters.is_empty() {
        true => format!(
            "formatted {}: joins the quorum at its bootstrap servers",
            config.data_dir.display()
        ),
        false => format!(
            "formatted {}: the quorum starts with voters {:?}",
            config.data_dir.display(),
            voters.keys().collect::<Vec<_>>()
        ),
    })
}

fn build_config(node: &NodeArgs) -> Result<BrokerConfig, String> {
    let NodeArgs {
        config,
        listen,
        advertise,
        data_dir,
        node_id,
        set,
    } = node;
    let mut c = match config {
        Some(path) => BrokerConfig::load(path).map_err(|e| e.to_string())?,
        None => BrokerConfig::default(),
    };
    let mut overrides: Vec<(String, String)> = Vec::new();
    if let Some(v) = listen {
        overrides.push(("listeners".into(), v.clone()));
    }
    if let Some(v) = advertise {
        overrides.push(("advertised.listeners".into(), v.clone()));
    }
    if let Some(v) = data_dir {
        overrides.push(("log.dirs".into(), v.display().to_string()));
    }
    if let Some(v) = node_id {
        overrides.push(("node.id".into(), v.to_string()));
    }
    for kv in set {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("--set {kv}: expected KEY=VALUE"))?;
        overrides.push((k.trim().to_string(), v.to_string()));
    }
    for (k, v) in overrides {
        c.set(&k, &v).map_err(|e| e.to_string())?;
    }
    c.check().map_err(|e| e.to_string())?;
    Ok(c)
}

/// Request frames are read into buffers of their size, up to `socket.request.max.bytes`, and
/// freed once answered. glibc's malloc maps an allocation above a threshold that starts at
/// 128 KiB on its own and unmaps it when freed, and gives back free memory at the top of a heap
/// above 2x that: then every frame of a producer's 1 MiB requests lands in fresh pages, which
/// the kernel must fault in and zero (measured: ~90,000 page faults per 2 GB produced with
/// several requests in flight, 8 % of the broker's CPU). Fixed thresholds keep such buffers in
/// the heap and reused. What stays mapped is bounded by what was in use at once, which
/// `queued.max.request.bytes` bounds. A no-op with other C libraries.
fn keep_freed_request_memory() {
    #[cfg(target_env = "gnu")]
    {
        /// Allocations at least this large are still mapped and unmapped on their own.
        const MMAP_THRESHOLD: libc::c_int = 64 << 20;
        /// Free memory at the top of a heap kept for reuse before it is given back.
        const TRIM_THRESHOLD: libc::c_int = 256 << 20;
        // SAFETY: mallopt only changes malloc's parameters; called before the runtime starts.
        let set = unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
        };
        if !set {
            tracing::warn!("cannot set malloc's mmap and trim thresholds; request buffers are mapped afresh");
        }
    }
}

/// Raises the soft limit on open files (RLIMIT_NOFILE) to the hard limit and logs both. Every
/// connection and every segment's log and index files hold a descriptor, and distributions
/// start processes at a soft limit of 1024. The JVM that runs Kafka does the same at start
/// (HotSpot's `-XX:+MaxFDLimit`, on by default). A failure is logged and start-up goes on.
fn raise_open_files_limit() {
    let show = |limit: libc::rlim_t| {
        if limit == libc::RLIM_INFINITY {
            "unlimited".to_string()
        } else {
            limit.to_string()
        }
    };
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only the struct it is given, which lives on this stack.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        let error = std::io::Error::last_os_error();
        tracing::warn!(%error, "cannot read the open files limit (RLIMIT_NOFILE)");
        return;
    }
    let (soft, hard) = (limit.rlim_cur, limit.rlim_max);
    if soft < hard {
        let raised = libc::rlimit {
            rlim_cur: hard,
            rlim_max: hard,
        };
        // SAFETY: setrlimit only reads the struct it is given.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            let error = std::io::Error::last_os_error();
            tracing::warn!(
                soft = %show(soft), hard = %show(hard), %error,
                "cannot raise the open files limit (RLIMIT_NOFILE) to its hard limit"
            );
            return;
        }
        tracing::info!(
            soft = %show(hard), hard = %show(hard), was = %show(soft),
            "open files limit (RLIMIT_NOFILE) raised to its hard limit"
        );
    } else {
        tracing::info!(soft = %show(soft), hard = %show(hard), "open files limit (RLIMIT_NOFILE)");
    }
}

/// How long a node whose metadata log failed tries to stop cleanly before it exits anyway.
const FAULT_STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // The admin commands print answers on stdout: no broker logging there.
    let cli = match cli.command {
        Command::Admin(command) => return sluice::cli::run(command),
        command => Cli { command },
    };
    // Colour only on a terminal: redirected logs (files, docker logs) stay plain text. Levels
    // start from RUST_LOG and may change at runtime (BROKER_LOGGER, sluice::verbosity).
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout()) && std::env::var_os("NO_COLOR").is_none();
    // openraft logs every failed RPC to an unreachable peer (each election timeout, at WARN
    // and ERROR): with a node down that drowns everything else, so it is off unless RUST_LOG
    // names it; the quorum's own events (leader, fencing, registration) are Sluice's lines.
    let directives = std::env::var("RUST_LOG").ok().filter(|d| !d.trim().is_empty());
    sluice::verbosity::install(
        directives.as_deref().unwrap_or("info,openraft=off"),
        ansi,
        std::io::stdout,
    );
    let node = match &cli.command {
        Command::Serve { node } => node,
        Command::Format {
            node,
            standalone,
            initial_controllers,
            no_initial_controllers,
            add_scram,
        } => {
            return match format(
                node,
                *standalone,
                initial_controllers.as_deref(),
                *no_initial_controllers,
                add_scram,
            ) {
                Ok(done) => {
                    println!("{done}");
                    std::process::ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("sluice format: {e}");
                    std::process::ExitCode::from(2)
                }
            };
        }
        Command::Healthcheck { address } => {
            return match healthcheck(address) {
                Ok(()) => std::process::ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("sluice healthcheck: {e}");
                    std::process::ExitCode::FAILURE
                }
            };
        }
        Command::Admin(_) => return std::process::ExitCode::FAILURE, // dispatched above
    };
    let config = match build_config(node) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sluice: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    raise_open_files_limit();
    keep_freed_request_memory();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sluice: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let handle = match Broker::start(config).await {
            Ok(h) => h,
            Err(e) => {
                eprintln!("sluice: {e}");
                return std::process::ExitCode::FAILURE;
            }
        };
        let fault = tokio::select! {
            _ = wait_for_signal() => None,
            fault = handle.failed() => Some(fault),
        };
        let Some(fault) = fault else {
            tracing::info!("shutting down");
            handle.shutdown().await;
            return std::process::ExitCode::SUCCESS;
        };
        // Kafka halts a broker whose metadata log directory fails. This node stops as cleanly
        // as the failure lets it: the controlled shutdown moves its partitions at once, and
        // partitions whose storage failed are left for recovery at the next start.
        tracing::error!(
            error = %fault,
            "the metadata log failed: this node stops rather than serve metadata frozen at the failure; \
             repair or replace its data directory's disk, then start it again"
        );
        if tokio::time::timeout(FAULT_STOP_WAIT, handle.shutdown()).await.is_err() {
            tracing::error!("stopping took longer than {FAULT_STOP_WAIT:?}; exiting");
        }
        std::process::ExitCode::FAILURE
    })
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
