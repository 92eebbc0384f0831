//! A small etcd v3 gRPC client: just the calls the agent makes (KV Range and Txn, Lease Grant
//! and Revoke, Watch), over one tonic channel to one endpoint. Failover between members is the
//! caller's job ([`crate::store::Store`]), as tonic's balanced channel keeps routing requests
//! to a dead member.

pub mod proto;

use std::time::Duration;

use futures_channel::mpsc;
use http::uri::PathAndQuery;
use tonic::client::Grpc;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Status, Streaming};
use tonic_prost::ProstCodec;

use proto::{
    LeaseGrantRequest, LeaseGrantResponse, LeaseRevokeRequest, LeaseRevokeResponse, RangeRequest,
    RangeResponse, TxnRequest, TxnResponse, WatchCreateRequest, WatchRequest, WatchRequestUnion,
    WatchResponse,
};

/// Connection settings of every channel.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(5);
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(3);

/// Why an etcd call failed.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// The endpoint is not a usable URL.
    #[error("bad endpoint {endpoint}: {detail}")]
    Endpoint { endpoint: String, detail: String },
    /// The member answered with (or the channel produced) a gRPC status.
    #[error("{:?}: {}", .0.code(), .0.message())]
    Status(Status),
}

impl EtcdError {
    /// Whether the failure means "this member cannot serve now" (dead, unreachable,
    /// partitioned, without leader), so another member may succeed.
    pub fn is_member_failure(&self) -> bool {
        match self {
            EtcdError::Endpoint { .. } => false,
            EtcdError::Status(s) => matches!(
                s.code(),
                Code::Cancelled
                    | Code::Unknown
                    | Code::DeadlineExceeded
                    | Code::Aborted
                    | Code::Internal
                    | Code::Unavailable
            ),
        }
    }
}

impl From<Status> for EtcdError {
    fn from(s: Status) -> Self {
        EtcdError::Status(s)
    }
}

/// A client of one etcd member. Cloning is cheap (the channel is shared).
#[derive(Clone)]
pub struct Client {
    grpc: Grpc<Channel>,
}

/// The response stream of one watch; dropping it cancels the watch.
pub struct WatchStream {
    /// Kept open for the life of the watch: etcd serves a watch while its request stream lasts.
    _requests: mpsc::UnboundedSender<WatchRequest>,
    responses: Streaming<WatchResponse>,
}

impl WatchStream {
    /// The next response; `Ok(None)` when the member closed the stream.
    pub async fn message(&mut self) -> Result<Option<WatchResponse>, EtcdError> {
        Ok(self.responses.message().await?)
    }
}

impl Client {
    /// A client of `endpoint` (`host:port`, or a URL with `http://`). The channel connects
    /// lazily: the first call tells whether the member answers.
    pub fn new(endpoint: &str) -> Result<Client, EtcdError> {
        let url = if endpoint.contains("://") {
            endpoint.to_string()
        } else {
            format!("http://{endpoint}")
        };
        let bad = |detail: String| EtcdError::Endpoint {
            endpoint: endpoint.to_string(),
            detail,
        };
        if url.starts_with("https://") {
            return Err(bad("TLS endpoints are not supported".into()));
        }
        let channel = Endpoint::from_shared(url)
            .map_err(|e| bad(e.to_string()))?
            .connect_timeout(CONNECT_TIMEOUT)
            .http2_keep_alive_interval(KEEP_ALIVE_INTERVAL)
            .keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
            .keep_alive_while_idle(true)
            .connect_lazy();
        Ok(Client {
            grpc: Grpc::new(channel),
        })
    }

    /// A request that etcd refuses with `Unavailable` on a member without a leader, so a
    /// member cut off from the quorum fails (and the caller fails over) rather than go silent.
    fn request<T>(message: T) -> Request<T> {
        let mut req = Request::new(message);
        req.metadata_mut().insert(
            "hasleader",
            tonic::metadata::MetadataValue::from_static("true"),
        );
        req
    }

    async fn unary<Q, A>(&mut self, path: &'static str, message: Q) -> Result<A, EtcdError>
    where
        Q: prost::Message + Send + Sync + 'static,
        A: prost::Message + Default + Send + Sync + 'static,
    {
        self.ready().await?;
        let resp = self
            .grpc
            .unary(
                Self::request(message),
                PathAndQuery::from_static(path),
                ProstCodec::<Q, A>::default(),
            )
            .await?;
        Ok(resp.into_inner())
    }

    async fn ready(&mut self) -> Result<(), EtcdError> {
        self.grpc
            .ready()
            .await
            .map_err(|e| EtcdError::Status(Status::unavailable(format!("channel not ready: {e}"))))
    }

    pub async fn range(&mut self, req: RangeRequest) -> Result<RangeResponse, EtcdError> {
        self.unary("/etcdserverpb.KV/Range", req).await
    }

    pub async fn txn(&mut self, req: TxnRequest) -> Result<TxnResponse, EtcdError> {
        self.unary("/etcdserverpb.KV/Txn", req).await
    }

    pub async fn lease_grant(&mut self, ttl: i64) -> Result<LeaseGrantResponse, EtcdError> {
        self.unary("/etcdserverpb.Lease/LeaseGrant", LeaseGrantRequest { ttl })
            .await
    }

    pub async fn lease_revoke(&mut self, id: i64) -> Result<LeaseRevokeResponse, EtcdError> {
        self.unary("/etcdserverpb.Lease/LeaseRevoke", LeaseRevokeRequest { id })
            .await
    }

    /// Watches every key under `prefix` from `start_revision` on.
    pub async fn watch_prefix(
        &mut self,
        prefix: &[u8],
        start_revision: i64,
    ) -> Result<WatchStream, EtcdError> {
        let (requests, stream) = mpsc::unbounded();
        let create = WatchRequest {
            request_union: Some(WatchRequestUnion::Create(WatchCreateRequest {
                key: prefix.to_vec(),
                range_end: proto::prefix_range_end(prefix),
                start_revision,
            })),
        };
        requests
            .unbounded_send(create)
            .map_err(|e| EtcdError::Status(Status::internal(format!("queueing the watch: {e}"))))?;
        self.ready().await?;
        let responses = self
            .grpc
            .streaming(
                Self::request(stream),
                PathAndQuery::from_static("/etcdserverpb.Watch/Watch"),
                ProstCodec::<WatchRequest, WatchResponse>::default(),
            )
            .await?
            .into_inner();
        Ok(WatchStream {
            _requests: requests,
            responses,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_failures_are_the_codes_another_member_may_not_have() {
        let retry = |code| EtcdError::Status(Status::new(code, "x")).is_member_failure();
        for code in [
            Code::Cancelled,
            Code::Unknown,
            Code::DeadlineExceeded,
            Code::Aborted,
            Code::Internal,
            Code::Unavailable,
        ] {
            assert!(retry(code), "{code:?}");
        }
        for code in [
            Code::InvalidArgument,
            Code::NotFound,
            Code::FailedPrecondition,
            Code::PermissionDenied,
            Code::OutOfRange,
        ] {
            assert!(!retry(code), "{code:?}");
        }
    }

    #[test]
    fn tls_and_malformed_endpoints_are_refused() {
        assert!(matches!(
            Client::new("https://10.0.0.1:2379"),
            Err(EtcdError::Endpoint { .. })
        ));
        assert!(matches!(
            Client::new("not a url"),
            Err(EtcdError::Endpoint { .. })
        ));
    }
}
