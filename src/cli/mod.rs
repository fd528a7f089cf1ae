//! The admin CLI in the `sluice` binary (issue 14): `topic`, `group`, `cluster`, `acl`,
//! `feature`, `produce` and `consume` speak the Kafka protocol to any Kafka-compatible broker,
//! as Kafka's `kafka-topics`, `kafka-consumer-groups`, `kafka-acls`, `kafka-features`,
//! `kafka-cluster` and console clients do.
//!
//! Exit codes: 0 success, 1 the broker refused an operation (a Kafka error, named as Kafka
//! names it), 2 a usage error (clap's own), 3 no connection (unreachable, network, timeout).
//! Every failure is one line on stderr: `sluice: <what>: <why>`.

// Input from the network becomes an error line, never a panic.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod acl;
pub mod client;
pub mod feature;
pub mod group;
pub mod output;
pub mod produce;
pub mod topic;

use std::path::PathBuf;
use std::process::ExitCode;

use client::Client;
use output::Format;

/// Options every admin command takes.
#[derive(clap::Args, Debug, Clone)]
pub struct Connection {
    /// Bootstrap brokers, HOST:PORT[,HOST:PORT...].
    #[arg(short = 'b', long = "brokers", global = true, default_value = "127.0.0.1:9092")]
    pub brokers: String,
    /// A Kafka-style client properties file: security.protocol, sasl.mechanism,
    /// sasl.username / sasl.password or sasl.jaas.config, ssl.truststore.location.
    #[arg(long, global = true, value_name = "FILE")]
    pub command_config: Option<PathBuf>,
    /// How answers are printed: aligned tables, or one JSON document.
    #[arg(long, global = true, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// The admin subcommands, flattened into the binary's own.
#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Create, list, describe, delete and change topics.
    Topic {
        #[command(flatten)]
        connection: Connection,
        #[command(subcommand)]
        action: topic::TopicAction,
    },
    /// Consumer groups: list, describe with lag, delete, reset offsets.
    Group {
        #[command(flatten)]
        connection: Connection,
        #[command(subcommand)]
        action: group::GroupAction,
    },
    /// ACLs: list, create, delete.
    Acl {
        #[command(flatten)]
        connection: Connection,
        #[command(subcommand)]
        action: acl::AclAction,
    },
    /// Write stdin's lines to a topic, one record per line (acks=all).
    Produce {
        #[command(flatten)]
        connection: Connection,
        #[command(flatten)]
        args: produce::ProduceArgs,
    },
    /// Print a topic's records, one value per line.
    Consume {
        #[command(flatten)]
        connection: Connection,
        #[command(flatten)]
        args: produce::ConsumeArgs,
    },
    /// Feature levels (KIP-584): describe, upgrade, downgrade, disable.
    Feature {
        #[command(flatten)]
        connection: Connection,
        #[command(subcommand)]
        action: feature::FeatureAction,
    },
    /// The cluster: its id, controller and brokers.
    Cluster {
        #[command(flatten)]
        connection: Connection,
        #[command(subcommand)]
        action: ClusterAction,
    },
}

#[derive(clap::Subcommand, Debug)]
pub enum ClusterAction {
    /// The cluster id, the controller and the brokers (DescribeCluster, else Metadata).
    Describe,
    /// Removes a broker's registration, for a broker taken out for good (UnregisterBroker).
    Unregister {
        /// The broker's node id.
        #[arg(long)]
        id: i32,
    },
}

/// Why a command failed, and so its exit code.
#[derive(Debug)]
pub enum CliError {
    /// The broker answered with a Kafka error code (exit 1).
    Kafka { code: i16, message: String },
    /// The operation was refused for a reason the tool states itself (exit 1).
    Refused(String),
    /// Arguments or the properties file are wrong (exit 2).
    Usage(String),
    /// No answer: unreachable, a dropped connection, a timeout (exit 3).
    Network(String),
}

impl CliError {
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Kafka { .. } | CliError::Refused(_) => 1,
            CliError::Usage(_) => 2,
            CliError::Network(_) => 3,
        }
    }
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CliError::Kafka { code, message } => {
                let name = crate::metrics::error_name(*code);
                match message.trim() {
                    "" => {
                        let described = kafka_protocol::error::ResponseError::try_from_code(*code)
                            .map(|e| e.to_string())
                            .unwrap_or_default();
                        write!(f, "{name}: {described}")
                    }
                    message => write!(f, "{name}: {message}"),
                }
            }
            CliError::Refused(m) | CliError::Usage(m) | CliError::Network(m) => f.write_str(m),
        }
    }
}

/// Runs an admin command and prints its answer or its one error line.
pub fn run(command: Command) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sluice: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (what, result) = runtime.block_on(dispatch(command));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice: {what}: {}", one_line(&e.to_string()));
            ExitCode::from(e.exit_code())
        }
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

async fn connect(connection: &Connection) -> Result<Client, CliError> {
    let props = match &connection.command_config {
        Some(path) => client::read_properties(path)?,
        None => Default::default(),
    };
    Client::connect(&connection.brokers, client::dial_security(&props)?).await
}

/// Connects, runs `command` and prints its report in the format asked for.
async fn report<F, Fut>(connection: &Connection, command: F) -> Result<(), CliError>
where
    F: FnOnce(Client) -> Fut,
    Fut: std::future::Future<Output = Result<output::Report, CliError>>,
{
    let client = connect(connection).await?;
    command(client).await?.print(connection.format);
    Ok(())
}

/// The command's name for its error line, and its outcome.
async fn dispatch(command: Command) -> (String, Result<(), CliError>) {
    match command {
        Command::Topic { connection, action } => {
            let what = action.describe();
            (
                what,
                report(&connection, |client| async move { topic::run(&client, action).await }).await,
            )
        }
        Command::Group { connection, action } => {
            let what = action.describe();
            (
                what,
                report(&connection, |client| async move { group::run(&client, action).await }).await,
            )
        }
        Command::Acl { connection, action } => {
            let what = action.describe();
            (
                what,
                report(&connection, |client| async move { acl::run(&client, action).await }).await,
            )
        }
        Command::Produce { connection, args } => {
            let what = format!("produce {}", args.topic);
            let result = async {
                let client = connect(&connection).await?;
                produce::produce(&client, args, connection.format).await
            }
            .await;
            (what, result)
        }
        Command::Consume { connection, args } => {
            let what = format!("consume {}", args.topic);
            let result = async {
                let client = connect(&connection).await?;
                produce::consume(&client, args, connection.format).await
            }
            .await;
            (what, result)
        }
        Command::Feature { connection, action } => {
            let what = action.describe();
            (
                what,
                report(&connection, |client| async move { feature::run(&client, action).await }).await,
            )
        }
        Command::Cluster { connection, action } => {
            let what = match action {
                ClusterAction::Describe => "cluster describe".to_string(),
                ClusterAction::Unregister { id } => format!("cluster unregister {id}"),
            };
            let result = report(&connection, |client| async move {
                match action {
                    ClusterAction::Describe => topic::describe_cluster(&client).await,
                    ClusterAction::Unregister { id } => topic::unregister_broker(&client, id).await,
                }
            })
            .await;
            (what, result)
        }
    }
}

/// `k=v` → (k, v).
pub fn key_value(option: &str, text: &str) -> Result<(String, String), CliError> {
    text.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.to_string()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| CliError::Usage(format!("{option} {text}: expected KEY=VALUE")))
}
