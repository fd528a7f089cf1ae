//! ACLs and the authorizer, with Kafka's semantics (its `StandardAuthorizer`).
//!
//! An ACL binding allows or denies one principal, from one host, one operation on the resources
//! a pattern names: a LITERAL name (`*` for every resource of the type) or a PREFIXED one.
//! Bindings live in the metadata log (`MetadataRecord::Acls`), so they survive restarts and
//! reach every node. A request is decided thus:
//! 1. a super user (`super.users`) may do everything;
//! 2. a matching DENY (its operation that one or ALL) denies;
//! 3. a matching ALLOW allows; an ALLOW of READ, WRITE, DELETE or ALTER also allows DESCRIBE,
//!    and one of ALTER_CONFIGS allows DESCRIBE_CONFIGS;
//! 4. otherwise the request is denied, unless no binding at all names the resource and
//!    `allow.everyone.if.no.acl.found` is true.
//!
//! "Matching" means the binding's pattern covers the resource, its principal is the request's or
//! `User:*`, and its host is the client's address or `*`.

// Input from the network or disk becomes an `Error`, never a panic.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

use std::collections::BTreeSet;

use imbl::OrdSet;
use serde::{Deserialize, Serialize};

use crate::config::BrokerConfig;

/// The only name a CLUSTER resource has.
pub const CLUSTER_NAME: &str = "kafka-cluster";

/// The wildcard: every resource of a type (LITERAL `*`), any principal (`User:*`), any host.
pub const WILDCARD: &str = "*";

/// The authorizer class names that turn the authorizer on (Kafka's KRaft one, and its older
/// ZooKeeper one, which clients' docs still name).
pub const AUTHORIZER_CLASS_NAMES: &[&str] = &[
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
];

macro_rules! wire_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident = $code:literal => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub enum $name {
            $($variant = $code),+
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The wire code (an INT8).
            pub fn code(self) -> i8 {
                self as i8
            }

            /// None for UNKNOWN (0) and codes Kafka does not define.
            pub fn from_code(code: i8) -> Option<$name> {
                $name::ALL.iter().copied().find(|v| v.code() == code)
            }

            /// Kafka's name (`TOPIC`, `PREFIXED`, `DESCRIBE_CONFIGS`...).
            pub fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }
    };
}

wire_enum!(
    /// What kind of resource an ACL names (Kafka's `ResourceType`).
    ResourceType {
        Any = 1 => "ANY",
        Topic = 2 => "TOPIC",
        Group = 3 => "GROUP",
        Cluster = 4 => "CLUSTER",
        TransactionalId = 5 => "TRANSACTIONAL_ID",
        DelegationToken = 6 => "DELEGATION_TOKEN",
        User = 7 => "USER",
    }
);

wire_enum!(
    /// How an ACL's resource name is read (Kafka's `PatternType`); ANY and MATCH only filter.
    PatternType {
        Any = 1 => "ANY",
        Match = 2 => "MATCH",
        Literal = 3 => "LITERAL",
        Prefixed = 4 => "PREFIXED",
    }
);

wire_enum!(
    /// What an ACL allows or denies (Kafka's `AclOperation`); ANY only filters.
    Operation {
        Any = 1 => "ANY",
        All = 2 => "ALL",
        Read = 3 => "READ",
        Write = 4 => "WRITE",
        Create = 5 => "CREATE",
        Delete = 6 => "DELETE",
        Alter = 7 => "ALTER",
        Describe = 8 => "DESCRIBE",
        ClusterAction = 9 => "CLUSTER_ACTION",
        DescribeConfigs = 10 => "DESCRIBE_CONFIGS",
        AlterConfigs = 11 => "ALTER_CONFIGS",
        IdempotentWrite = 12 => "IDEMPOTENT_WRITE",
        CreateTokens = 13 => "CREATE_TOKENS",
        DescribeTokens = 14 => "DESCRIBE_TOKENS",
        TwoPhaseCommit = 15 => "TWO_PHASE_COMMIT",
    }
);

wire_enum!(
    /// Whether an ACL allows or denies (Kafka's `AclPermissionType`); ANY only filters.
    Permission {
        Any = 1 => "ANY",
        Deny = 2 => "DENY",
        Allow = 3 => "ALLOW",
    }
);

impl ResourceType {
    /// The operations that mean something on this type (Kafka's
    /// `AclEntry.supportedOperations`): what "authorized operations" fields are made of.
    pub fn operations(self) -> &'static [Operation] {
        use Operation::*;
        match self {
            ResourceType::Topic => &[
                Read,
                Write,
                Create,
                Describe,
                Delete,
                Alter,
                DescribeConfigs,
                AlterConfigs,
            ],
            ResourceType::Group => &[Read, Describe, Delete, DescribeConfigs, AlterConfigs],
            ResourceType::Cluster => &[
                Create,
                ClusterAction,
                DescribeConfigs,
                AlterConfigs,
                IdempotentWrite,
                Alter,
                Describe,
            ],
            ResourceType::TransactionalId => &[Describe, Write, TwoPhaseCommit],
            ResourceType::DelegationToken => &[Describe],
            ResourceType::User => &[CreateTokens, DescribeTokens],
            ResourceType::Any => &[],
        }
    }
}

impl Operation {
    /// Whether an ALLOW of `self` allows `wanted` (Kafka's implications).
    fn allows(self, wanted: Operation) -> bool {
        use Operation::*;
        self == All
            || self == wanted
            || (wanted == Describe && matches!(self, Read | Write | Delete | Alter))
            || (wanted == DescribeConfigs && self == AlterConfigs)
    }

    /// Whether a DENY of `self` denies `wanted`.
    fn denies(self, wanted: Operation) -> bool {
        self == Operation::All || self == wanted
    }
}

/// One ACL (Kafka's `AclBinding`: a resource pattern and an access control entry). Field order
/// is the sort order: bindings of one resource type sit together.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AclBinding {
    pub resource_type: ResourceType,
    pub pattern_type: PatternType,
    pub resource_name: String,
    pub principal: String,
    pub host: String,
    pub operation: Operation,
    pub permission: Permission,
}

impl AclBinding {
    /// Whether the binding's pattern covers resource `name` of type `resource_type`: the plain
    /// scan that `covering`'s range lookups are tested against.
    #[cfg(test)]
    fn covers(&self, resource_type: ResourceType, name: &str) -> bool {
        self.resource_type == resource_type
            && match self.pattern_type {
                PatternType::Literal => self.resource_name == name || self.resource_name == WILDCARD,
                PatternType::Prefixed => name.starts_with(&self.resource_name),
                _ => false,
            }
    }

    /// Whether the binding is about this principal and host.
    fn names(&self, principal: &str, host: &str) -> bool {
        principal_matches(&self.principal, principal) && (self.host == WILDCARD || self.host == host)
    }

    /// Why Kafka would refuse to create this binding (INVALID_REQUEST), if it would.
    pub fn invalid(&self) -> Option<String> {
        if matches!(self.resource_type, ResourceType::Any) {
            return Some("Invalid resourceType ANY".into());
        }
        if !matches!(self.pattern_type, PatternType::Literal | PatternType::Prefixed) {
            return Some(format!("Invalid patternType {}", self.pattern_type.name()));
        }
        if matches!(self.operation, Operation::Any) {
            return Some("Invalid operation ANY".into());
        }
        if matches!(self.permission, Permission::Any) {
            return Some("Invalid permissionType ANY".into());
        }
        if self.resource_name.is_empty() {
            return Some("Invalid empty resource name specified".into());
        }
        if self.resource_type == ResourceType::Cluster && self.resource_name != CLUSTER_NAME {
            return Some(format!(
                "The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
            ));
        }
        match self.principal.split_once(':') {
            Some((kind, name)) if !kind.is_empty() && !name.is_empty() => {}
            _ => {
                return Some(format!(
                    "Could not parse principal from `{}` (no colon is present separating the principal type from the principal name)",
                    self.principal
                ));
            }
        }
        if self.host.is_empty() {
            return Some("Invalid empty host specified".into());
        }
        None
    }
}

/// A principal of an ACL names `principal`: equal, or the wildcard of its type (`User:*`).
fn principal_matches(acl: &str, principal: &str) -> bool {
    if acl == principal {
        return true;
    }
    match (acl.split_once(':'), principal.split_once(':')) {
        (Some((kind, WILDCARD)), Some((their_kind, _))) => kind == their_kind,
        _ => false,
    }
}

/// Which bindings a DescribeAcls or DeleteAcls filter selects (Kafka's `AclBindingFilter`):
/// ANY and None match everything; pattern MATCH selects the bindings that would apply to a
/// resource of that name (its literal, the literal wildcard, and prefixes of it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclFilter {
    pub resource_type: ResourceType,
    pub resource_name: Option<String>,
    pub pattern_type: PatternType,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: Operation,
    pub permission: Permission,
}

impl AclFilter {
    pub fn matches(&self, b: &AclBinding) -> bool {
        let resource = (self.resource_type == ResourceType::Any || self.resource_type == b.resource_type)
            && match (&self.resource_name, self.pattern_type) {
                (_, PatternType::Match) => match &self.resource_name {
                    None => matches!(b.pattern_type, PatternType::Literal | PatternType::Prefixed),
                    Some(name) => match b.pattern_type {
                        PatternType::Literal => b.resource_name == *name || b.resource_name == WILDCARD,
                        PatternType::Prefixed => name.starts_with(&b.resource_name),
                        _ => false,
                    },
                },
                (None, PatternType::Any) => true,
                (Some(name), PatternType::Any) => b.resource_name == *name,
                (name, pattern) => pattern == b.pattern_type && name.as_ref().is_none_or(|n| *n == b.resource_name),
            };
        resource
            && self.principal.as_ref().is_none_or(|p| *p == b.principal)
            && self.host.as_ref().is_none_or(|h| *h == b.host)
            && (self.operation == Operation::Any || self.operation == b.operation)
            && (self.permission == Permission::Any || self.permission == b.permission)
    }
}

/// A client address as ACLs name hosts: Java's `InetAddress.getHostAddress()`, which Kafka
/// compares them with (`10.0.0.7`; IPv6 uncompressed, `0:0:0:0:0:0:0:1`); an IPv4-mapped
/// IPv6 address is its IPv4 one.
pub fn host_of(ip: std::net::IpAddr) -> String {
    match ip.to_canonical() {
        std::net::IpAddr::V4(v4) => v4.to_string(),
        std::net::IpAddr::V6(v6) => v6
            .segments()
            .iter()
            .map(|s| format!("{s:x}"))
            .collect::<Vec<_>>()
            .join(":"),
    }
}

/// The bindings in force (the metadata image's).
pub type Acls = OrdSet<AclBinding>;

/// The authorizer as configured: off (no `authorizer.class.name`: everything is allowed, and
/// the ACL APIs answer SECURITY_DISABLED) or on.
#[derive(Debug, Clone, Default)]
pub struct Authorizer {
    enabled: bool,
    super_users: BTreeSet<String>,
    allow_everyone_if_no_acl_found: bool,
}

impl Authorizer {
    pub fn new(config: &BrokerConfig) -> Authorizer {
        Authorizer {
            enabled: !config.authorizer_class_name.is_empty(),
            super_users: config.super_users.iter().cloned().collect(),
            allow_everyone_if_no_acl_found: config.allow_everyone_if_no_acl_found,
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Whether `principal` at `host` may do `operation` on the resource.
    pub fn authorize(
        &self,
        acls: &Acls,
        principal: &str,
        host: &str,
        operation: Operation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        if !self.enabled || self.super_users.contains(principal) {
            return true;
        }
        let mut any_binding = false;
        let mut allowed = false;
        for b in covering(acls, resource_type, name) {
            any_binding = true;
            if !b.names(principal, host) {
                continue;
            }
            match b.permission {
                Permission::Deny if b.operation.denies(operation) => return false,
                Permission::Allow if b.operation.allows(operation) => allowed = true,
                _ => {}
            }
        }
        allowed || (!any_binding && self.allow_everyone_if_no_acl_found)
    }

    /// Whether `principal` may do `operation` on some resource of the type (Kafka's
    /// `authorizeByResourceType`, which KIP-679 uses for idempotent producers: WRITE on any
    /// topic): an ALLOW whose pattern no DENY of the principal covers whole.
    pub fn authorize_any(
        &self,
        acls: &Acls,
        principal: &str,
        host: &str,
        operation: Operation,
        resource_type: ResourceType,
    ) -> bool {
        if !self.enabled || self.super_users.contains(principal) {
            return true;
        }
        let mine: Vec<&AclBinding> = bindings_of(acls, resource_type)
            .filter(|b| b.names(principal, host))
            .collect();
        let denies: Vec<&&AclBinding> = mine
            .iter()
            .filter(|b| b.permission == Permission::Deny && b.operation.denies(operation))
            .collect();
        let denied_whole = |allow: &AclBinding| {
            denies.iter().any(|d| match d.pattern_type {
                PatternType::Literal => {
                    d.resource_name == WILDCARD
                        || (allow.pattern_type == PatternType::Literal && d.resource_name == allow.resource_name)
                }
                PatternType::Prefixed => allow.resource_name.starts_with(&d.resource_name),
                _ => false,
            })
        };
        let allowed = mine
            .iter()
            .filter(|b| b.permission == Permission::Allow && b.operation.allows(operation))
            .any(|b| !denied_whole(b));
        allowed || (self.allow_everyone_if_no_acl_found && bindings_of(acls, resource_type).next().is_none())
    }

    /// The operations `principal` may do on the resource, as Kafka's 32-bit field (bit `code`
    /// set for each): the "authorized operations" of Metadata, DescribeGroups, DescribeCluster.
    /// Without an authorizer: every operation the type supports.
    pub fn operations(&self, acls: &Acls, principal: &str, host: &str, resource_type: ResourceType, name: &str) -> i32 {
        resource_type
            .operations()
            .iter()
            .filter(|op| self.authorize(acls, principal, host, **op, resource_type, name))
            .fold(0, |bits, op| bits | (1 << op.code()))
    }
}

/// The bindings whose pattern covers resource `name` of the type, found by range lookups in
/// the sorted set (type, pattern type, name first), as Kafka's StandardAuthorizerData does:
/// the LITERAL name, the LITERAL wildcard, and a PREFIXED pattern for each prefix of the name.
/// Each lookup is logarithmic, so a check costs O(len(name) * log(bindings)), not a scan.
fn covering<'a>(acls: &'a Acls, resource_type: ResourceType, name: &'a str) -> impl Iterator<Item = &'a AclBinding> {
    let literal = [Some(name), (name != WILDCARD).then_some(WILDCARD)]
        .into_iter()
        .flatten()
        .map(|n| (PatternType::Literal, n));
    let prefixes = name
        .char_indices()
        .map(|(i, _)| &name[..i])
        .chain(std::iter::once(name))
        .map(|p| (PatternType::Prefixed, p));
    literal.chain(prefixes).flat_map(move |(pattern_type, pattern)| {
        let lowest = AclBinding {
            resource_type,
            pattern_type,
            resource_name: pattern.to_string(),
            principal: String::new(),
            host: String::new(),
            operation: Operation::Any,
            permission: Permission::Any,
        };
        acls.range(lowest..).take_while(move |b| {
            b.resource_type == resource_type && b.pattern_type == pattern_type && b.resource_name == pattern
        })
    })
}

/// The bindings of one resource type (the set sorts by type first).
fn bindings_of(acls: &Acls, resource_type: ResourceType) -> impl Iterator<Item = &AclBinding> {
    acls.iter()
        .skip_while(move |b| b.resource_type < resource_type)
        .take_while(move |b| b.resource_type == resource_type)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(
        rt: ResourceType,
        pattern: PatternType,
        name: &str,
        who: &str,
        op: Operation,
        perm: Permission,
    ) -> AclBinding {
        AclBinding {
            resource_type: rt,
            pattern_type: pattern,
            resource_name: name.into(),
            principal: who.into(),
            host: "*".into(),
            operation: op,
            permission: perm,
        }
    }

    fn on(super_users: &[&str], allow_everyone: bool) -> Authorizer {
        Authorizer {
            enabled: true,
            super_users: super_users.iter().map(|s| s.to_string()).collect(),
            allow_everyone_if_no_acl_found: allow_everyone,
        }
    }

    use Operation::*;
    use PatternType::*;
    use Permission::*;
    use ResourceType::*;

    #[test]
    fn deny_by_default_and_super_users() {
        let acls = Acls::new();
        assert!(!on(&[], false).authorize(&acls, "User:alice", "1.2.3.4", Read, Topic, "t"));
        assert!(on(&[], true).authorize(&acls, "User:alice", "1.2.3.4", Read, Topic, "t"));
        assert!(on(&["User:alice"], false).authorize(&acls, "User:alice", "1.2.3.4", Read, Topic, "t"));
        assert!(Authorizer::default().authorize(&acls, "User:x", "h", Alter, Cluster, CLUSTER_NAME));
    }

    #[test]
    fn implications_and_deny_over_allow() {
        let mut acls = Acls::new();
        acls.insert(acl(Topic, Prefixed, "orders-", "User:alice", Write, Allow));
        acls.insert(acl(Topic, Literal, "orders-secret", "User:alice", All, Deny));
        let a = on(&[], true);
        assert!(a.authorize(&acls, "User:alice", "h", Write, Topic, "orders-1"));
        assert!(a.authorize(&acls, "User:alice", "h", Describe, Topic, "orders-1"));
        assert!(!a.authorize(&acls, "User:alice", "h", Read, Topic, "orders-1"));
        assert!(!a.authorize(&acls, "User:alice", "h", Write, Topic, "orders-secret"));
        // Another principal: bindings name the resource, so allow-everyone does not apply.
        assert!(!a.authorize(&acls, "User:bob", "h", Describe, Topic, "orders-1"));
        // No binding covers it: allow-everyone applies.
        assert!(a.authorize(&acls, "User:bob", "h", Read, Topic, "other"));
        // A DENY of READ does not deny DESCRIBE.
        acls.insert(acl(Topic, Literal, "orders-1", "User:alice", Read, Deny));
        assert!(a.authorize(&acls, "User:alice", "h", Describe, Topic, "orders-1"));
        assert_eq!(
            a.operations(&acls, "User:alice", "h", Topic, "orders-1"),
            (1 << Write.code()) | (1 << Describe.code())
        );
    }

    #[test]
    fn wildcards_hosts_and_by_type() {
        let mut acls = Acls::new();
        acls.insert(acl(Group, Literal, "*", "User:*", Read, Allow));
        let a = on(&[], false);
        assert!(a.authorize(&acls, "User:carol", "h", Read, Group, "g"));
        assert!(!a.authorize(&acls, "Group:x", "h", Read, Group, "g"));
        let mut host = acl(Topic, Literal, "t", "User:dave", Write, Allow);
        host.host = "10.0.0.1".into();
        acls.insert(host);
        assert!(a.authorize(&acls, "User:dave", "10.0.0.1", Write, Topic, "t"));
        assert!(!a.authorize(&acls, "User:dave", "10.0.0.2", Write, Topic, "t"));
        assert!(a.authorize_any(&acls, "User:dave", "10.0.0.1", Write, Topic));
        assert!(!a.authorize_any(&acls, "User:erin", "10.0.0.1", Write, Topic));
        acls.insert(acl(Topic, Prefixed, "", "User:dave", Write, Deny));
        assert!(!a.authorize_any(&acls, "User:dave", "10.0.0.1", Write, Topic));
    }

    #[test]
    fn range_lookups_find_what_a_scan_finds() {
        let mut acls = Acls::new();
        for (pattern, name) in [
            (Literal, "orders"),
            (Literal, "*"),
            (Literal, "ordersX"),
            (Prefixed, "o"),
            (Prefixed, "ord"),
            (Prefixed, "orders"),
            (Prefixed, "ordersX"),
            (Prefixed, "x"),
        ] {
            for who in ["User:a", "User:b"] {
                acls.insert(acl(Topic, pattern, name, who, Read, Allow));
                acls.insert(acl(Group, pattern, name, who, Read, Allow));
            }
        }
        for name in ["orders", "ordersX", "o", "x", "", "*", "é-orders"] {
            let mut found: Vec<&AclBinding> = covering(&acls, Topic, name).collect();
            let mut scanned: Vec<&AclBinding> = acls.iter().filter(|b| b.covers(Topic, name)).collect();
            found.sort();
            scanned.sort();
            assert_eq!(found, scanned, "{name}");
        }
    }

    #[test]
    fn hosts_read_as_java_writes_them() {
        use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
        assert_eq!(host_of(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7))), "10.0.0.7");
        assert_eq!(host_of(IpAddr::V6(Ipv6Addr::LOCALHOST)), "0:0:0:0:0:0:0:1");
        assert_eq!(
            host_of(IpAddr::V6(Ipv4Addr::new(10, 0, 0, 7).to_ipv6_mapped())),
            "10.0.0.7"
        );
        assert_eq!(host_of("fe80::1:abcd".parse().unwrap()), "fe80:0:0:0:0:0:1:abcd");
    }

    #[test]
    fn filters() {
        let b = acl(Topic, Prefixed, "orders-", "User:alice", Write, Allow);
        let all = AclFilter {
            resource_type: ResourceType::Any,
            resource_name: None,
            pattern_type: PatternType::Any,
            principal: None,
            host: None,
            operation: Operation::Any,
            permission: Permission::Any,
        };
        assert!(all.matches(&b));
        let matching = AclFilter {
            resource_name: Some("orders-1".into()),
            pattern_type: Match,
            ..all.clone()
        };
        assert!(matching.matches(&b));
        let literal = AclFilter {
            resource_name: Some("orders-".into()),
            pattern_type: Literal,
            ..all.clone()
        };
        assert!(!literal.matches(&b));
        let any_named = AclFilter {
            resource_name: Some("orders-".into()),
            ..all
        };
        assert!(any_named.matches(&b));
        assert!(b.invalid().is_none());
        assert!(acl(Cluster, Literal, "c", "User:a", Alter, Allow).invalid().is_some());
        assert!(acl(Topic, Literal, "t", "alice", Alter, Allow).invalid().is_some());
    }
}
