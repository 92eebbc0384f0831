//! What the compiler refuses: a policy the apiserver would not have admitted. Every message
//! names the policy (`namespace/name`) and the field, in the API's path syntax
//! (`spec.ingress[0].from[1].ipBlock.except[0]`).

use crate::model::PolicyKey;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("policy {policy}: {field}: {value:?} is not a valid CIDR: {reason}")]
    BadCidr {
        policy: PolicyKey,
        field: String,
        value: String,
        reason: String,
    },
    #[error(
        "policy {policy}: {field}: {except} is not a strict subset of the block's cidr {cidr}"
    )]
    ExceptOutsideCidr {
        policy: PolicyKey,
        field: String,
        except: String,
        cidr: String,
    },
    #[error("policy {policy}: {field}: endPort needs a numeric port")]
    EndPortWithoutNumericPort { policy: PolicyKey, field: String },
    #[error("policy {policy}: {field}: endPort {end_port} is below port {port}")]
    EndPortBelowPort {
        policy: PolicyKey,
        field: String,
        port: i32,
        end_port: i32,
    },
    #[error("policy {policy}: {field}: {value} is not a port (1-65535)")]
    PortOutOfRange {
        policy: PolicyKey,
        field: String,
        value: i32,
    },
    #[error("policy {policy}: {field}: {value:?} is not a valid port name (IANA_SVC_NAME: 1-15 lower-case letters, digits and inner single hyphens, one letter at least)")]
    BadPortName {
        policy: PolicyKey,
        field: String,
        value: String,
    },
    #[error("policy {policy}: {field}: unsupported protocol {value:?} (TCP, UDP or SCTP)")]
    UnknownProtocol {
        policy: PolicyKey,
        field: String,
        value: String,
    },
    #[error(
        "policy {policy}: {field}: unknown operator {value:?} (In, NotIn, Exists or DoesNotExist)"
    )]
    UnknownOperator {
        policy: PolicyKey,
        field: String,
        value: String,
    },
    #[error("policy {policy}: {field}: operator {operator} {needs}")]
    OperatorValues {
        policy: PolicyKey,
        field: String,
        operator: String,
        needs: &'static str,
    },
    #[error("policy {policy}: {field}: {value:?} is not a valid label {what}")]
    BadLabel {
        policy: PolicyKey,
        field: String,
        what: &'static str,
        value: String,
    },
    #[error("policy {policy}: {field}: unknown policy type {value:?} (Ingress or Egress)")]
    UnknownPolicyType {
        policy: PolicyKey,
        field: String,
        value: String,
    },
    #[error("policy {policy}: {field}: more than two policy types")]
    TooManyPolicyTypes { policy: PolicyKey, field: String },
    #[error(
        "policy {policy}: {field}: a peer needs a podSelector, a namespaceSelector or an ipBlock"
    )]
    EmptyPeer { policy: PolicyKey, field: String },
    #[error("policy {policy}: {field}: an ipBlock peer may not also have a selector")]
    IpBlockWithSelector { policy: PolicyKey, field: String },
    /// Two of the plan's set names came out equal (their hash suffixes collided); the later
    /// policy is refused rather than sharing a set with another.
    #[error("policy {policy}: set name {name} is already another set's")]
    SetNameCollision { policy: PolicyKey, name: String },
}

impl PolicyError {
    /// The policy refused.
    pub fn policy(&self) -> &PolicyKey {
        match self {
            PolicyError::BadCidr { policy, .. }
            | PolicyError::ExceptOutsideCidr { policy, .. }
            | PolicyError::EndPortWithoutNumericPort { policy, .. }
            | PolicyError::EndPortBelowPort { policy, .. }
            | PolicyError::PortOutOfRange { policy, .. }
            | PolicyError::BadPortName { policy, .. }
            | PolicyError::UnknownProtocol { policy, .. }
            | PolicyError::UnknownOperator { policy, .. }
            | PolicyError::OperatorValues { policy, .. }
            | PolicyError::BadLabel { policy, .. }
            | PolicyError::UnknownPolicyType { policy, .. }
            | PolicyError::TooManyPolicyTypes { policy, .. }
            | PolicyError::EmptyPeer { policy, .. }
            | PolicyError::IpBlockWithSelector { policy, .. }
            | PolicyError::SetNameCollision { policy, .. } => policy,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_policy_and_field() {
        let err = PolicyError::ExceptOutsideCidr {
            policy: PolicyKey {
                namespace: "prod".into(),
                name: "db".into(),
            },
            field: "spec.ingress[0].from[1].ipBlock.except[0]".into(),
            except: "10.1.0.0/16".into(),
            cidr: "10.0.0.0/16".into(),
        };
        assert_eq!(
            err.to_string(),
            "policy prod/db: spec.ingress[0].from[1].ipBlock.except[0]: 10.1.0.0/16 is not a \
             strict subset of the block's cidr 10.0.0.0/16"
        );
        assert_eq!(err.policy().name, "db");
    }
}
