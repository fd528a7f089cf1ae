//! Sluice: a message broker that speaks the Apache Kafka wire protocol.

pub mod error;
pub mod log;
