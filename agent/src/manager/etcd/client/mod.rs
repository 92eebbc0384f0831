//! A small etcd v3 gRPC client: just the calls the agent makes (KV Range and Txn, Lease Grant
//! and Revoke, Watch, Auth Authenticate), over one tonic channel to one endpoint, in plain text
//! or TLS (rustls, optionally with a client certificate), with or without a user. It knows
//! nothing of flannel's layout. Failover between members is the caller's job (the store), as
//! tonic's balanced channel keeps routing requests to a dead member.

pub mod proto;
mod tls_probe;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_channel::mpsc;
use http::uri::PathAndQuery;
use tonic::client::Grpc;
use tonic::metadata::MetadataValue;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::{Code, Request, Status, Streaming};
use tonic_prost::ProstCodec;

pub use crate::options::{Credentials, TlsFiles};
use proto::{
    AuthenticateRequest, AuthenticateResponse, LeaseGrantRequest, LeaseGrantResponse,
    LeaseRevokeRequest, LeaseRevokeResponse, RangeRequest, RangeResponse, TxnRequest, TxnResponse,
    WatchCreateRequest, WatchRequest, WatchRequestUnion, WatchResponse,
};

/// The largest response the client decodes (tonic's default is 4 MiB). etcd takes values up
/// to its `--max-request-bytes` (1.5 MiB by default; 10 MiB is the most its docs advise), so
/// any one key-value fits; listings are paged far below this, and the watch asks for
/// fragmented responses, so a flood of large values never makes a message too large.
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// Connection settings of every channel.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(5);
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(3);
/// Where Debian (and most distributions) keep the system's CA bundle: the trust anchors of an
/// `https://` endpoint when no `--etcd-cafile` is given, as flanneld (Go's crypto/tls) does.
const SYSTEM_CA_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

/// etcd's status messages the client acts on (`api/v3rpc/rpctypes`).
const MSG_AUTH_FAILED: &str = "authentication failed, invalid user ID or password";
const MSG_USER_EMPTY: &str = "user name is empty";
const MSG_INVALID_TOKEN: &str = "invalid auth token";
const MSG_AUTH_OLD_REVISION: &str = "revision of auth store is old";
const MSG_AUTH_NOT_ENABLED: &str = "authentication is not enabled";
const MSG_PERMISSION_DENIED: &str = "permission denied";
/// A range or watch at a revision etcd no longer keeps (`mvcc.ErrCompacted`).
const MSG_COMPACTED: &str = "required revision has been compacted";
/// tonic's refusal of a response over the decode limit.
const MSG_TOO_LARGE: &str = "message length too large";

/// Why an etcd call failed.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// The endpoint is not a usable URL.
    #[error("bad endpoint {endpoint}: {detail}")]
    Endpoint { endpoint: String, detail: String },
    /// A TLS file cannot be used (unreadable, not PEM, a certificate without its key).
    #[error("{flag} {path}: {detail}")]
    TlsFile {
        flag: &'static str,
        path: PathBuf,
        detail: String,
    },
    /// The TLS handshake was refused, by us (the server's certificate) or by the member (ours).
    #[error("TLS with etcd at {endpoint} failed: {detail}")]
    Tls { endpoint: String, detail: String },
    /// The member refused our user, password or token, or wants one.
    #[error("etcd at {endpoint} refused the request: {detail}")]
    Auth { endpoint: String, detail: String },
    /// The member answered with (or the channel produced) a gRPC status.
    #[error("{:?}: {}", .0.code(), .0.message())]
    Status(Status),
}

impl EtcdError {
    /// Whether the failure means "this member cannot serve now" (dead, unreachable,
    /// partitioned, without leader), so another member may succeed.
    pub fn is_member_failure(&self) -> bool {
        match self {
            EtcdError::Endpoint { .. }
            | EtcdError::TlsFile { .. }
            | EtcdError::Tls { .. }
            | EtcdError::Auth { .. } => false,
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

    /// Whether the response was larger than [`MAX_RESPONSE_BYTES`] (ask for less).
    pub fn is_too_large(&self) -> bool {
        matches!(self, EtcdError::Status(s) if s.code() == Code::OutOfRange && s.message().contains(MSG_TOO_LARGE))
    }

    /// Whether the revision asked for was compacted away (read the latest instead).
    pub fn is_compacted(&self) -> bool {
        matches!(self, EtcdError::Status(s) if s.message().contains(MSG_COMPACTED))
    }

    /// Whether waiting cannot fix it (wrong CA, certificate or password): start-up stops at once.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            EtcdError::TlsFile { .. } | EtcdError::Tls { .. } | EtcdError::Auth { .. }
        )
    }
}

impl From<Status> for EtcdError {
    fn from(s: Status) -> Self {
        EtcdError::Status(s)
    }
}

/// What every connection needs besides its URL: the TLS material (read once) and the user.
#[derive(Clone, Default)]
pub struct Security {
    tls: Option<ClientTlsConfig>,
    /// Says which CA judged the server's certificate, in TLS errors.
    ca_source: String,
    client_cert: Option<PathBuf>,
    material: tls_probe::Material,
    credentials: Option<Credentials>,
}

fn read_file(flag: &'static str, path: &Path) -> Result<Vec<u8>, EtcdError> {
    let bytes = std::fs::read(path).map_err(|e| EtcdError::TlsFile {
        flag,
        path: path.to_path_buf(),
        detail: e.to_string(),
    })?;
    let marker: &[u8] = if flag == "--etcd-keyfile" {
        b"PRIVATE KEY-----"
    } else {
        b"-----BEGIN CERTIFICATE-----"
    };
    if !bytes.windows(marker.len()).any(|w| w == marker) {
        return Err(EtcdError::TlsFile {
            flag,
            path: path.to_path_buf(),
            detail: if flag == "--etcd-keyfile" {
                "no PEM private key in it".into()
            } else {
                "no PEM certificate in it".into()
            },
        });
    }
    Ok(bytes)
}

impl Security {
    /// Reads the TLS files (each error names its flag and file) and keeps the user.
    pub fn load(files: &TlsFiles, credentials: Option<Credentials>) -> Result<Security, EtcdError> {
        let mut config = ClientTlsConfig::new();
        let mut material = tls_probe::Material::default();
        let ca_source;
        match &files.ca {
            Some(path) => {
                let pem = read_file("--etcd-cafile", path)?;
                material.ca = Some(pem.clone());
                config = config.ca_certificate(Certificate::from_pem(pem));
                ca_source = format!("--etcd-cafile {}", path.display());
            }
            None => {
                let bundle = SYSTEM_CA_BUNDLES
                    .iter()
                    .find_map(|p| std::fs::read(p).ok().map(|b| (p, b)));
                match bundle {
                    Some((path, bytes)) => {
                        material.ca = Some(bytes.clone());
                        config = config.ca_certificate(Certificate::from_pem(bytes));
                        ca_source = format!("the system CA bundle {path} (no --etcd-cafile)");
                    }
                    None => ca_source = "no CA at all (no --etcd-cafile, no system bundle)".into(),
                }
            }
        }
        match (&files.cert, &files.key) {
            (Some(cert), Some(key)) => {
                let cert_pem = read_file("--etcd-certfile", cert)?;
                let key_pem = read_file("--etcd-keyfile", key)?;
                crate::ops::secrets::warn_if_exposed("--etcd-keyfile", key);
                material.identity = Some((cert_pem.clone(), key_pem.clone()));
                config = config.identity(Identity::from_pem(cert_pem, key_pem));
            }
            (Some(cert), None) => {
                return Err(EtcdError::TlsFile {
                    flag: "--etcd-certfile",
                    path: cert.clone(),
                    detail: "given without --etcd-keyfile".into(),
                })
            }
            (None, Some(key)) => {
                return Err(EtcdError::TlsFile {
                    flag: "--etcd-keyfile",
                    path: key.clone(),
                    detail: "given without --etcd-certfile".into(),
                })
            }
            (None, None) => {}
        }
        Ok(Security {
            tls: Some(config),
            ca_source,
            client_cert: files.cert.clone(),
            material,
            credentials,
        })
    }

    pub fn username(&self) -> Option<&str> {
        self.credentials.as_ref().map(|c| c.username.as_str())
    }
}

/// The token of one member's session (etcd's simple tokens are valid on their issuer only).
#[derive(Default)]
struct Session {
    token: Mutex<Option<String>>,
    /// A call succeeded: TLS works with this member, no need to probe it on failures.
    answered: std::sync::atomic::AtomicBool,
}

/// A client of one etcd member. Cloning is cheap (the channel and session are shared).
#[derive(Clone)]
pub struct Client {
    grpc: Grpc<Channel>,
    endpoint: String,
    url: String,
    security: Security,
    session: Arc<Session>,
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

/// Every message of an error and its sources, outermost first.
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    chain_from(e.to_string(), e.source())
}

/// A status's message and its sources' (tonic's own Display of a status is a debug dump).
fn status_chain(s: &Status) -> String {
    chain_from(s.message().to_string(), std::error::Error::source(s))
}

fn chain_from(first: String, source: Option<&(dyn std::error::Error + 'static)>) -> String {
    let mut parts = vec![first];
    let mut cur = source;
    while let Some(s) = cur {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        cur = s.source();
    }
    parts.join(": ")
}

/// Whether etcd says the token is no longer good (expired, from another member, or issued
/// before an auth change): authenticate again and retry.
fn token_rejected(s: &Status) -> bool {
    s.message().contains(MSG_INVALID_TOKEN) || s.message().contains(MSG_AUTH_OLD_REVISION)
}

impl Client {
    /// A client of `endpoint` (`host:port`, or a URL with `http://` or `https://`). The channel
    /// connects lazily: the first call tells whether the member answers.
    pub fn new(endpoint: &str, security: &Security) -> Result<Client, EtcdError> {
        let url = if endpoint.contains("://") {
            endpoint.to_string()
        } else {
            format!("http://{endpoint}")
        };
        let bad = |detail: String| EtcdError::Endpoint {
            endpoint: endpoint.to_string(),
            detail,
        };
        if !url.starts_with("http://") && !url.starts_with("https://") {
            return Err(bad("the scheme must be http:// or https://".into()));
        }
        let mut ep = Endpoint::from_shared(url.clone()).map_err(|e| bad(e.to_string()))?;
        if url.starts_with("https://") {
            let tls = security.tls.clone().unwrap_or_default();
            ep = ep.tls_config(tls).map_err(|e| EtcdError::Tls {
                endpoint: endpoint.to_string(),
                detail: error_chain(&e),
            })?;
        }
        let channel = ep
            .connect_timeout(CONNECT_TIMEOUT)
            .http2_keep_alive_interval(KEEP_ALIVE_INTERVAL)
            .keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
            .keep_alive_while_idle(true)
            .connect_lazy();
        Ok(Client {
            grpc: Grpc::new(channel).max_decoding_message_size(MAX_RESPONSE_BYTES),
            endpoint: endpoint.to_string(),
            url,
            security: security.clone(),
            session: Arc::new(Session::default()),
        })
    }

    /// A request that etcd refuses with `Unavailable` on a member without a leader, so a
    /// member cut off from the quorum fails (and the caller fails over) rather than go silent;
    /// with the session's token when there is one.
    fn request<T>(message: T, token: Option<&str>) -> Request<T> {
        let mut req = Request::new(message);
        req.metadata_mut()
            .insert("hasleader", MetadataValue::from_static("true"));
        if let Some(t) = token.and_then(|t| MetadataValue::try_from(t).ok()) {
            req.metadata_mut().insert("token", t);
        }
        req
    }

    /// Turns a failed call's status into what it means: a TLS refusal (naming the CA or the
    /// client certificate), an authentication refusal, or a plain status.
    fn classify(&self, s: Status) -> EtcdError {
        let chain = status_chain(&s);
        self.classify_text(s, chain)
    }

    /// [`Self::classify`], and for a transport failure of a TLS member never yet reached, a
    /// probe handshake that reads the member's verdict (see [`tls_probe`]).
    async fn failed(&self, s: Status) -> EtcdError {
        let e = self.classify(s);
        let EtcdError::Status(s) = e else { return e };
        let transport = matches!(
            s.code(),
            Code::Cancelled | Code::Unknown | Code::Unavailable
        );
        if !transport
            || self.security.tls.is_none()
            || self
                .session
                .answered
                .load(std::sync::atomic::Ordering::Relaxed)
        {
            return EtcdError::Status(s);
        }
        let Some(uri) = self
            .url
            .parse::<http::Uri>()
            .ok()
            .filter(|u| u.scheme_str() == Some("https"))
        else {
            return EtcdError::Status(s);
        };
        let (Some(host), port) = (uri.host(), uri.port_u16().unwrap_or(2379)) else {
            return EtcdError::Status(s);
        };
        match tls_probe::probe(host, port, &self.security.material).await {
            Some(why) => {
                let chain = format!("{}: {why}", status_chain(&s));
                self.classify_text(s, chain)
            }
            None => EtcdError::Status(s),
        }
    }

    fn classify_text(&self, s: Status, chain: String) -> EtcdError {
        let tls = |detail: String| EtcdError::Tls {
            endpoint: self.endpoint.clone(),
            detail,
        };
        let lower = chain.to_ascii_lowercase();
        if lower.contains("invalid peer certificate") {
            return tls(format!(
                "the member's certificate is not trusted by {} ({chain})",
                self.security.ca_source
            ));
        }
        if lower.contains("certificaterequired")
            || lower.contains("certificate required")
            || lower.contains("badcertificate")
            || lower.contains("bad certificate")
            || lower.contains("unknownca")
            || lower.contains("unknown ca")
        {
            return tls(match &self.security.client_cert {
                None => format!(
                    "the member requires a client certificate: pass --etcd-certfile and \
                     --etcd-keyfile ({chain})"
                ),
                Some(cert) => format!(
                    "the member refused the client certificate --etcd-certfile {} ({chain})",
                    cert.display()
                ),
            });
        }
        if lower.contains("invalidcontenttype") || lower.contains("corrupt message") {
            return tls(format!(
                "the member does not speak TLS on this port (use http://?) ({chain})"
            ));
        }
        let auth = |detail: String| EtcdError::Auth {
            endpoint: self.endpoint.clone(),
            detail,
        };
        let msg = s.message();
        if msg.contains(MSG_USER_EMPTY) {
            return auth(
                "etcd has authentication enabled: pass --etcd-username and --etcd-password".into(),
            );
        }
        if msg.contains(MSG_AUTH_FAILED) {
            return auth(format!(
                "wrong --etcd-username {:?} or --etcd-password ({msg})",
                self.security.username().unwrap_or_default()
            ));
        }
        if s.code() == Code::PermissionDenied || msg.contains(MSG_PERMISSION_DENIED) {
            return auth(format!(
                "user {:?} lacks the permission ({msg}); grant it read-write on the prefix",
                self.security.username().unwrap_or_default()
            ));
        }
        EtcdError::Status(s)
    }

    /// The session's token, authenticating first when there is none yet. `None` without a
    /// user, or when etcd has authentication disabled.
    async fn token(&mut self) -> Result<Option<String>, EtcdError> {
        let Some(creds) = self.security.credentials.clone() else {
            return Ok(None);
        };
        if let Some(t) = self.session.token.lock().ok().and_then(|t| t.clone()) {
            return Ok(Some(t));
        }
        self.ready().await?;
        let req = AuthenticateRequest {
            name: creds.username,
            password: creds.password,
        };
        let resp = self
            .grpc
            .unary(
                Self::request(req, None),
                PathAndQuery::from_static("/etcdserverpb.Auth/Authenticate"),
                ProstCodec::<AuthenticateRequest, AuthenticateResponse>::default(),
            )
            .await;
        match resp {
            Ok(r) => {
                let token = r.into_inner().token;
                crate::ops::metrics::ETCD_AUTHENTICATIONS.inc();
                if let Ok(mut t) = self.session.token.lock() {
                    *t = Some(token.clone());
                }
                Ok(Some(token))
            }
            // A user given to an etcd without auth: requests go through without a token.
            Err(s) if s.message().contains(MSG_AUTH_NOT_ENABLED) => Ok(None),
            Err(s) => Err(self.failed(s).await),
        }
    }

    fn forget_token(&self) {
        if let Ok(mut t) = self.session.token.lock() {
            *t = None;
        }
    }

    async fn unary<Q, A>(&mut self, path: &'static str, message: Q) -> Result<A, EtcdError>
    where
        Q: prost::Message + Clone + Send + Sync + 'static,
        A: prost::Message + Default + Send + Sync + 'static,
    {
        let mut refreshed = false;
        loop {
            let token = self.token().await?;
            self.ready().await?;
            let resp = self
                .grpc
                .unary(
                    Self::request(message.clone(), token.as_deref()),
                    PathAndQuery::from_static(path),
                    ProstCodec::<Q, A>::default(),
                )
                .await;
            match resp {
                Ok(r) => {
                    self.session
                        .answered
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                    return Ok(r.into_inner());
                }
                // Tokens expire (etcd's --auth-token-ttl); get a new one once.
                Err(s) if token.is_some() && !refreshed && token_rejected(&s) => {
                    self.forget_token();
                    refreshed = true;
                }
                Err(s) => return Err(self.failed(s).await),
            }
        }
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

    /// Watches every key under `prefix` from `start_revision` on. A watch refused for its
    /// token (it expired) comes back as a cancelled response: the caller re-lists, which
    /// authenticates again, and watches anew.
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
                fragment: true,
            })),
        };
        requests
            .unbounded_send(create)
            .map_err(|e| EtcdError::Status(Status::internal(format!("queueing the watch: {e}"))))?;
        let token = self.token().await?;
        self.ready().await?;
        let responses = match self
            .grpc
            .streaming(
                Self::request(stream, token.as_deref()),
                PathAndQuery::from_static("/etcdserverpb.Watch/Watch"),
                ProstCodec::<WatchRequest, WatchResponse>::default(),
            )
            .await
        {
            Ok(r) => r.into_inner(),
            Err(s) => {
                if token_rejected(&s) {
                    self.forget_token();
                }
                return Err(self.failed(s).await);
            }
        };
        Ok(WatchStream {
            _requests: requests,
            responses,
        })
    }

    /// Drops the token after a watch was cancelled for it.
    pub fn watch_cancelled(&self, reason: &str) {
        if reason.contains(MSG_INVALID_TOKEN) || reason.contains(MSG_AUTH_OLD_REVISION) {
            self.forget_token();
        }
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
    fn oversized_responses_and_compacted_revisions_are_told_apart() {
        let status = |code, msg: &str| EtcdError::Status(Status::new(code, msg));
        let big = status(
            Code::OutOfRange,
            "Error, decoded message length too large: found 20971520 bytes, the limit is: 16777216 bytes",
        );
        assert!(big.is_too_large() && !big.is_compacted() && !big.is_member_failure());
        let gone = status(
            Code::OutOfRange,
            "etcdserver: mvcc: required revision has been compacted",
        );
        assert!(gone.is_compacted() && !gone.is_too_large());
        assert!(!status(Code::Unavailable, "x").is_too_large());
    }

    // The lazy channel's background task needs a runtime.
    #[tokio::test]
    async fn malformed_endpoints_are_refused_and_https_accepted() {
        let none = Security::default();
        assert!(Client::new("https://10.0.0.1:2379", &none).is_ok());
        assert!(Client::new("10.0.0.1:2379", &none).is_ok());
        for bad in ["not a url", "unix:///run/etcd.sock"] {
            assert!(
                matches!(Client::new(bad, &none), Err(EtcdError::Endpoint { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn tls_files_are_checked_and_named() {
        let dir = std::env::temp_dir().join(format!("ferrocni-agent-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let not_pem = dir.join("garbage.pem");
        std::fs::write(&not_pem, "hello").unwrap();
        let files = |ca: Option<&Path>, cert: Option<&Path>, key: Option<&Path>| TlsFiles {
            ca: ca.map(Path::to_path_buf),
            cert: cert.map(Path::to_path_buf),
            key: key.map(Path::to_path_buf),
        };
        let missing = dir.join("missing.pem");
        let cases = [
            (files(Some(&missing), None, None), "--etcd-cafile"),
            (files(Some(&not_pem), None, None), "--etcd-cafile"),
            (files(None, Some(&not_pem), None), "--etcd-certfile"),
            (files(None, None, Some(&not_pem)), "--etcd-keyfile"),
        ];
        for (f, flag) in cases {
            match Security::load(&f, None) {
                Err(e @ EtcdError::TlsFile { .. }) => {
                    let text = e.to_string();
                    assert!(text.starts_with(flag), "{text}");
                    assert!(e.is_refusal());
                }
                Err(e) => panic!("{f:?}: {e}"),
                Ok(_) => panic!("{f:?} accepted"),
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn credentials_never_print_the_password() {
        let c = Credentials {
            username: "flannel".into(),
            password: "s3cret".into(),
        };
        assert!(!format!("{c:?}").contains("s3cret"));
    }
}
