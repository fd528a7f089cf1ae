//! The error codes a response carries, for the per-API error counts (Kafka's
//! `AbstractResponse.errorCounts`, exported as `kafka_network_requestmetrics_errors_total`).

/// Every error code in a response, once per place it appears (0 for NONE included), as Kafka's
/// `errorCounts` reports them.
pub trait ErrorCodes {
    fn error_codes(&self, count: &mut dyn FnMut(i16));
}

use kafka_protocol::messages::*;

/// `codes!(Response, |r, c| body)`: the body hands each error code of `r` to `c`.
macro_rules! codes {
    ($t:ty, |$r:ident, $c:ident| $body:expr) => {
        impl ErrorCodes for $t {
            fn error_codes(&self, $c: &mut dyn FnMut(i16)) {
                let $r = self;
                $body
            }
        }
    };
}

/// Responses whose only error code is the top-level one.
macro_rules! top_level {
    ($($t:ty),* $(,)?) => {
        $(codes!($t, |r, c| c(r.error_code));)*
    };
}

top_level!(
    ApiVersionsResponse,
    JoinGroupResponse,
    SyncGroupResponse,
    HeartbeatResponse,
    ListGroupsResponse,
    ConsumerGroupHeartbeatResponse,
    ListConfigResourcesResponse,
    DescribeClusterResponse,
    InitProducerIdResponse,
    AddOffsetsToTxnResponse,
    EndTxnResponse,
    ListTransactionsResponse,
    ListPartitionReassignmentsResponse,
    AddRaftVoterResponse,
    RemoveRaftVoterResponse,
    DescribeAclsResponse,
    CreateDelegationTokenResponse,
    RenewDelegationTokenResponse,
    ExpireDelegationTokenResponse,
    DescribeDelegationTokenResponse,
    UnregisterBrokerResponse,
);

codes!(UpdateFeaturesResponse, |r, c| {
    c(r.error_code);
    r.results.iter().for_each(|f| c(f.error_code));
});

codes!(ProduceResponse, |r, c| {
    for t in &r.responses {
        t.partition_responses.iter().for_each(|p| c(p.error_code));
    }
});
codes!(FetchResponse, |r, c| {
    c(r.error_code);
    for t in &r.responses {
        t.partitions.iter().for_each(|p| c(p.error_code));
    }
});
codes!(MetadataResponse, |r, c| {
    for t in &r.topics {
        c(t.error_code);
        t.partitions.iter().for_each(|p| c(p.error_code));
    }
});
codes!(ListOffsetsResponse, |r, c| {
    for t in &r.topics {
        t.partitions.iter().for_each(|p| c(p.error_code));
    }
});
codes!(CreateTopicsResponse, |r, c| r
    .topics
    .iter()
    .for_each(|t| c(t.error_code)));
codes!(DeleteTopicsResponse, |r, c| r
    .responses
    .iter()
    .for_each(|t| c(t.error_code)));
codes!(CreatePartitionsResponse, |r, c| r
    .results
    .iter()
    .for_each(|t| c(t.error_code)));
codes!(FindCoordinatorResponse, |r, c| {
    // v4+ answers per key; before, one top-level code.
    if r.coordinators.is_empty() {
        c(r.error_code)
    } else {
        r.coordinators.iter().for_each(|k| c(k.error_code))
    }
});
codes!(LeaveGroupResponse, |r, c| {
    c(r.error_code);
    r.members.iter().for_each(|m| c(m.error_code));
});
codes!(DescribeGroupsResponse, |r, c| r
    .groups
    .iter()
    .for_each(|g| c(g.error_code)));
codes!(DeleteGroupsResponse, |r, c| r
    .results
    .iter()
    .for_each(|g| c(g.error_code)));
codes!(OffsetCommitResponse, |r, c| {
    for t in &r.topics {
        t.partitions.iter().for_each(|p| c(p.error_code));
    }
});
codes!(OffsetFetchResponse, |r, c| {
    if r.groups.is_empty() {
        c(r.error_code);
        for t in &r.topics {
            t.partitions.iter().for_each(|p| c(p.error_code));
        }
    } else {
        for g in &r.groups {
            c(g.error_code);
            for t in &g.topics {
                t.partitions.iter().for_each(|p| c(p.error_code));
            }
        }
    }
});
codes!(OffsetDeleteResponse, |r, c| {
    c(r.error_code);
    for t in &r.topics {
        t.partitions.iter().for_each(|p| c(p.error_code));
    }
});
codes!(ConsumerGroupDescribeResponse, |r, c| r
    .groups
    .iter()
    .for_each(|g| c(g.error_code)));
codes!(ShareGroupHeartbeatResponse, |r, c| c(r.error_code));
codes!(ShareGroupDescribeResponse, |r, c| r
    .groups
    .iter()
    .for_each(|g| c(g.error_code)));
codes!(ShareFetchResponse, |r, c| {
    c(r.error_code);
    for t in &r.responses {
        for p in &t.partitions {
            c(p.error_code);
            c(p.acknowledge_error_code);
        }
    }
});
codes!(ShareAcknowledgeResponse, |r, c| {
    c(r.error_code);
    for t in &r.responses {
        t.partitions.iter().for_each(|p| c(p.error_code));
    }
});
codes!(ReadShareGroupStateResponse, |r, c| r
    .results
    .iter()
    .for_each(|t| t.partitions.iter().for_each(|p| c(p.error_code))));
codes!(WriteShareGroupStateResponse, |r, c| r
    .results
    .iter()
    .for_each(|t| t.partitions.iter().for_each(|p| c(p.error_code))));
codes!(DescribeShareGroupOffsetsResponse, |r, c| {
    for g in &r.groups {
        c(g.error_code);
        for t in &g.topics {
            t.partitions.iter().for_each(|p| c(p.error_code));
        }
    }
});
codes!(AlterShareGroupOffsetsResponse, |r, c| {
    c(r.error_code);
    for t in &r.responses {
        t.partitions.iter().for_each(|p| c(p.error_code));
    }
});
codes!(DeleteShareGroupOffsetsResponse, |r, c| {
    c(r.error_code);
    r.responses.iter().for_each(|t| c(t.error_code));
});
codes!(DescribeConfigsResponse, |r, c| r
    .results
    .iter()
    .for_each(|x| c(x.error_code)));
codes!(AlterConfigsResponse, |r, c| r
    .responses
    .iter()
    .for_each(|x| c(x.error_code)));
codes!(IncrementalAlterConfigsResponse, |r, c| r
    .responses
    .iter()
    .for_each(|x| c(x.error_code)));
codes!(AlterReplicaLogDirsResponse, |r, c| {
    for t in &r.results {
        t.partitions.iter().for_each(|p| c(p.error_code));
    }
});
codes!(DescribeLogDirsResponse, |r, c| {
    c(r.error_code);
    r.results.iter().for_each(|d| c(d.error_code));
});
codes!(DeleteRecordsResponse, |r, c| {
    for t in &r.topics {
        t.partitions.iter().for_each(|p| c(p.error_code));
    }
});
codes!(AddPartitionsToTxnResponse, |r, c| {
    // v4+ answers per transaction; before, per partition of the one transaction.
    c(r.error_code);
    let topics = r
        .results_by_transaction
        .iter()
        .flat_map(|x| &x.topic_results)
        .chain(&r.results_by_topic_v3_and_below);
    for t in topics {
        t.results_by_partition.iter().for_each(|p| c(p.partition_error_code));
    }
});
codes!(TxnOffsetCommitResponse, |r, c| {
    for t in &r.topics {
        t.partitions.iter().for_each(|p| c(p.error_code));
    }
});
codes!(DescribeTransactionsResponse, |r, c| r
    .transaction_states
    .iter()
    .for_each(|x| c(x.error_code)));
codes!(DescribeProducersResponse, |r, c| {
    for t in &r.topics {
        t.partitions.iter().for_each(|p| c(p.error_code));
    }
});
codes!(OffsetForLeaderEpochResponse, |r, c| {
    for t in &r.topics {
        t.partitions.iter().for_each(|p| c(p.error_code));
    }
});
codes!(ElectLeadersResponse, |r, c| {
    c(r.error_code);
    for t in &r.replica_election_results {
        t.partition_result.iter().for_each(|p| c(p.error_code));
    }
});
codes!(AlterPartitionReassignmentsResponse, |r, c| {
    c(r.error_code);
    for t in &r.responses {
        t.partitions.iter().for_each(|p| c(p.error_code));
    }
});
codes!(WriteTxnMarkersResponse, |r, c| {
    for m in &r.markers {
        for t in &m.topics {
            t.partitions.iter().for_each(|p| c(p.error_code));
        }
    }
});
codes!(DescribeQuorumResponse, |r, c| {
    c(r.error_code);
    for t in &r.topics {
        t.partitions.iter().for_each(|p| c(p.error_code));
    }
});
codes!(DescribeTopicPartitionsResponse, |r, c| r
    .topics
    .iter()
    .for_each(|t| c(t.error_code)));
codes!(DescribeUserScramCredentialsResponse, |r, c| {
    c(r.error_code);
    r.results.iter().for_each(|x| c(x.error_code));
});
codes!(AlterUserScramCredentialsResponse, |r, c| r
    .results
    .iter()
    .for_each(|x| c(x.error_code)));
codes!(CreateAclsResponse, |r, c| r
    .results
    .iter()
    .for_each(|x| c(x.error_code)));
codes!(DescribeClientQuotasResponse, |r, c| c(r.error_code));
codes!(AlterClientQuotasResponse, |r, c| r
    .entries
    .iter()
    .for_each(|x| c(x.error_code)));
codes!(DeleteAclsResponse, |r, c| r
    .filter_results
    .iter()
    .for_each(|x| c(x.error_code)));

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::metadata_response::{MetadataResponsePartition, MetadataResponseTopic};

    #[test]
    fn metadata_counts_topic_and_partition_codes() {
        let resp = MetadataResponse::default().with_topics(vec![
            MetadataResponseTopic::default().with_error_code(3),
            MetadataResponseTopic::default().with_partitions(vec![
                MetadataResponsePartition::default(),
                MetadataResponsePartition::default(),
            ]),
        ]);
        let mut seen = Vec::new();
        resp.error_codes(&mut |code| seen.push(code));
        seen.sort();
        assert_eq!(seen, vec![0, 0, 0, 3]);
    }
}
