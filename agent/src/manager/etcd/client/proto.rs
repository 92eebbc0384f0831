//! The etcd v3 messages the agent exchanges, declared by hand for prost (no protoc at build
//! time). Field numbers are those of etcd's `api/etcdserverpb/rpc.proto` and
//! `api/mvccpb/kv.proto`; fields the agent never sets or reads are left out (prost skips
//! unknown fields when decoding).

/// `etcdserverpb.ResponseHeader`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ResponseHeader {
    #[prost(int64, tag = "3")]
    pub revision: i64,
}

/// `mvccpb.KeyValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct KeyValue {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    /// The revision the key was created at (kept across updates, new after a delete): the
    /// lease's age, which settles two leases claiming one subnet.
    #[prost(int64, tag = "2")]
    pub create_revision: i64,
    #[prost(int64, tag = "3")]
    pub mod_revision: i64,
    #[prost(bytes = "vec", tag = "5")]
    pub value: Vec<u8>,
    #[prost(int64, tag = "6")]
    pub lease: i64,
}

/// `mvccpb.Event.EventType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, prost::Enumeration)]
#[repr(i32)]
pub enum EventType {
    Put = 0,
    Delete = 1,
}

/// `mvccpb.Event`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Event {
    #[prost(enumeration = "EventType", tag = "1")]
    pub r#type: i32,
    #[prost(message, optional, tag = "2")]
    pub kv: Option<KeyValue>,
}

/// `etcdserverpb.RangeRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RangeRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub range_end: Vec<u8>,
    /// At most this many keys (0 = all).
    #[prost(int64, tag = "3")]
    pub limit: i64,
    /// Read the store as it was at this revision (0 = the latest).
    #[prost(int64, tag = "4")]
    pub revision: i64,
    /// Keys and their revisions without values.
    #[prost(bool, tag = "8")]
    pub keys_only: bool,
}

/// `etcdserverpb.RangeResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RangeResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    #[prost(message, repeated, tag = "2")]
    pub kvs: Vec<KeyValue>,
    /// More keys are in the range than `limit` let through.
    #[prost(bool, tag = "3")]
    pub more: bool,
}

/// `etcdserverpb.PutRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PutRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
    /// 0 = no lease.
    #[prost(int64, tag = "3")]
    pub lease: i64,
}

/// `etcdserverpb.DeleteRangeRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DeleteRangeRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
}

/// `etcdserverpb.RequestOp` (the operations a transaction runs).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RequestOp {
    #[prost(oneof = "Request", tags = "2, 3")]
    pub request: Option<Request>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Request {
    #[prost(message, tag = "2")]
    Put(PutRequest),
    #[prost(message, tag = "3")]
    DeleteRange(DeleteRangeRequest),
}

/// `etcdserverpb.Compare.CompareResult`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, prost::Enumeration)]
#[repr(i32)]
pub enum CompareResult {
    Equal = 0,
    Greater = 1,
}

/// `etcdserverpb.Compare.CompareTarget`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, prost::Enumeration)]
#[repr(i32)]
pub enum CompareTarget {
    Version = 0,
    Mod = 2,
}

/// `etcdserverpb.Compare`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Compare {
    #[prost(enumeration = "CompareResult", tag = "1")]
    pub result: i32,
    #[prost(enumeration = "CompareTarget", tag = "2")]
    pub target: i32,
    #[prost(bytes = "vec", tag = "3")]
    pub key: Vec<u8>,
    #[prost(oneof = "TargetUnion", tags = "4, 6")]
    pub target_union: Option<TargetUnion>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum TargetUnion {
    #[prost(int64, tag = "4")]
    Version(i64),
    #[prost(int64, tag = "6")]
    ModRevision(i64),
}

/// `etcdserverpb.TxnRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TxnRequest {
    #[prost(message, repeated, tag = "1")]
    pub compare: Vec<Compare>,
    #[prost(message, repeated, tag = "2")]
    pub success: Vec<RequestOp>,
}

/// `etcdserverpb.TxnResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TxnResponse {
    #[prost(bool, tag = "2")]
    pub succeeded: bool,
}

/// `etcdserverpb.AuthenticateRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AuthenticateRequest {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub password: String,
}

/// `etcdserverpb.AuthenticateResponse`: the token to send as `token` metadata.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AuthenticateResponse {
    #[prost(string, tag = "2")]
    pub token: String,
}

/// `etcdserverpb.LeaseGrantRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LeaseGrantRequest {
    /// Seconds.
    #[prost(int64, tag = "1")]
    pub ttl: i64,
}

/// `etcdserverpb.LeaseGrantResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LeaseGrantResponse {
    #[prost(int64, tag = "2")]
    pub id: i64,
}

/// `etcdserverpb.LeaseRevokeRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LeaseRevokeRequest {
    #[prost(int64, tag = "1")]
    pub id: i64,
}

/// `etcdserverpb.LeaseRevokeResponse` (only a header, which the agent does not need).
#[derive(Clone, PartialEq, prost::Message)]
pub struct LeaseRevokeResponse {}

/// `etcdserverpb.WatchRequest` (the agent only ever creates one watch per stream).
#[derive(Clone, PartialEq, prost::Message)]
pub struct WatchRequest {
    #[prost(oneof = "WatchRequestUnion", tags = "1")]
    pub request_union: Option<WatchRequestUnion>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum WatchRequestUnion {
    #[prost(message, tag = "1")]
    Create(WatchCreateRequest),
}

/// `etcdserverpb.WatchCreateRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WatchCreateRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub range_end: Vec<u8>,
    #[prost(int64, tag = "3")]
    pub start_revision: i64,
    /// Lets etcd split a revision's events over several responses (each within its
    /// `--max-request-bytes`), so a large catch-up never makes one oversized message.
    #[prost(bool, tag = "8")]
    pub fragment: bool,
}

/// `etcdserverpb.WatchResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WatchResponse {
    #[prost(bool, tag = "4")]
    pub canceled: bool,
    #[prost(int64, tag = "5")]
    pub compact_revision: i64,
    #[prost(string, tag = "6")]
    pub cancel_reason: String,
    /// More responses follow with the rest of this revision's events.
    #[prost(bool, tag = "7")]
    pub fragment: bool,
    #[prost(message, repeated, tag = "11")]
    pub events: Vec<Event>,
}

/// The end of the key range holding every key that starts with `prefix` (etcd's convention:
/// the prefix with its last byte below 0xff incremented; `\0` when there is none).
pub fn prefix_range_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn prefix_range_end_increments_the_last_byte_below_ff() {
        assert_eq!(prefix_range_end(b"/a/subnets/"), b"/a/subnets0");
        assert_eq!(prefix_range_end(b"a\xff"), b"b");
        assert_eq!(prefix_range_end(b"\xff\xff"), b"\0");
    }

    /// Bytes as etcd's Go code (gogoproto) encodes them, written out from the .proto field
    /// numbers and wire types: key = 1 (bytes), mod_revision = 3, value = 5, lease = 6.
    #[test]
    fn key_value_decodes_from_wire_bytes() {
        let wire = [
            0x0a, 0x01, b'k', // key
            0x10, 0x07, // create_revision 7
            0x18, 0x09, // mod_revision 9
            0x20, 0x01, // version (skipped)
            0x2a, 0x02, b'v', b'1', // value
            0x30, 0x2a, // lease 42
        ];
        let kv = KeyValue::decode(&wire[..]).unwrap();
        assert_eq!(kv.key, b"k");
        assert_eq!(kv.create_revision, 7);
        assert_eq!(kv.mod_revision, 9);
        assert_eq!(kv.value, b"v1");
        assert_eq!(kv.lease, 42);
    }

    #[test]
    fn txn_encodes_compare_and_put_with_etcd_field_numbers() {
        let txn = TxnRequest {
            compare: vec![Compare {
                result: CompareResult::Greater as i32,
                target: CompareTarget::Mod as i32,
                key: b"k".to_vec(),
                target_union: Some(TargetUnion::ModRevision(5)),
            }],
            success: vec![RequestOp {
                request: Some(Request::Put(PutRequest {
                    key: b"k".to_vec(),
                    value: b"v".to_vec(),
                    lease: 3,
                })),
            }],
        };
        let expected = [
            0x0a, 0x09, // compare (field 1), 9 bytes
            0x08, 0x01, // result GREATER
            0x10, 0x02, // target MOD
            0x1a, 0x01, b'k', // key
            0x30, 0x05, // mod_revision 5 (field 6)
            0x12, 0x0a, // success (field 2), 10 bytes
            0x12, 0x08, // request_put (field 2), 8 bytes
            0x0a, 0x01, b'k', 0x12, 0x01, b'v', 0x18, 0x03,
        ];
        assert_eq!(txn.encode_to_vec(), expected);
    }

    #[test]
    fn paged_range_requests_carry_limit_revision_and_keys_only() {
        let req = RangeRequest {
            key: b"a".to_vec(),
            range_end: b"b".to_vec(),
            limit: 1000,
            revision: 42,
            keys_only: true,
        };
        let expected = [
            0x0a, 0x01, b'a', // key
            0x12, 0x01, b'b', // range_end
            0x18, 0xe8, 0x07, // limit 1000 (field 3)
            0x20, 0x2a, // revision 42 (field 4)
            0x40, 0x01, // keys_only (field 8)
        ];
        assert_eq!(req.encode_to_vec(), expected);
        // A plain GET sends none of them.
        let get = RangeRequest {
            key: b"a".to_vec(),
            ..RangeRequest::default()
        };
        assert_eq!(get.encode_to_vec(), [0x0a, 0x01, b'a']);
        // `more` (field 3) says a page was cut by the limit.
        let resp = RangeResponse::decode(&[0x18, 0x01, 0x20, 0x05][..]).unwrap();
        assert!(resp.more);
    }

    #[test]
    fn watches_ask_for_fragments_and_read_them() {
        let create = WatchCreateRequest {
            key: b"p".to_vec(),
            range_end: Vec::new(),
            start_revision: 0,
            fragment: true,
        };
        assert_eq!(create.encode_to_vec(), [0x0a, 0x01, b'p', 0x40, 0x01]);
        let resp = WatchResponse::decode(&[0x38, 0x01][..]).unwrap();
        assert!(resp.fragment);
    }

    #[test]
    fn watch_response_reads_cancellation_and_events() {
        let wire = [
            0x20, 0x01, // canceled
            0x28, 0x0c, // compact_revision 12
            0x32, 0x01, b'x', // cancel_reason
            0x5a, 0x07, // events (field 11)
            0x08, 0x01, // type DELETE
            0x12, 0x03, 0x0a, 0x01, b'k', // kv { key }
        ];
        let resp = WatchResponse::decode(&wire[..]).unwrap();
        assert!(resp.canceled);
        assert_eq!(resp.compact_revision, 12);
        assert_eq!(resp.cancel_reason, "x");
        assert_eq!(resp.events[0].r#type, EventType::Delete as i32);
        assert_eq!(resp.events[0].kv.as_ref().unwrap().key, b"k");
    }
}
