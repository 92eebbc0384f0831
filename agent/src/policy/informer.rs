//! One kind's informer: a paged listing, then a watch from its resourceVersion, handing every
//! object over as the store's `Update`s. The watch resumes from the last event's version when
//! the server closes it, and the kind is listed again on "410 Gone", on an error event and on
//! a failed request (after a pause, so an apiserver that refuses is not hammered). The
//! listing is whole before it is handed over: the store never sees half a kind.

use std::fmt::Debug;
use std::time::Duration;

use futures_channel::mpsc::UnboundedSender;
use futures_util::StreamExt;
use kube::api::{Api, ListParams, WatchParams};
use kube::core::WatchEvent;
use kube::Resource;
use serde::de::DeserializeOwned;

use super::store::{key, Kind, Object, Update};
use crate::warn;

/// Objects per listing page.
const PAGE: u32 = 500;
/// How long one listing page may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// The shortest server-side watch timeout (each informer adds a spread).
const MIN_WATCH_TIMEOUT: u32 = 300;
/// The pause after a failed request.
const RETRY: Duration = Duration::from_secs(2);

/// Lists and watches `api`'s objects for ever, converting each with `convert`; returns when the
/// receiver is gone.
pub async fn run<K>(api: Api<K>, kind: Kind, convert: fn(&K) -> Object, tx: UnboundedSender<Update>)
where
    K: Resource + Clone + DeserializeOwned + Debug + 'static,
{
    let what = kind.as_str();
    loop {
        let (objects, mut version) = match list(&api, convert).await {
            Ok(listed) => listed,
            Err(e) => {
                warn!("policy: LIST {what}: {e}; retrying");
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        if tx.unbounded_send(Update::Listed(kind, objects)).is_err() {
            return;
        }
        // Watch until the kind must be listed again.
        loop {
            let spread = (std::process::id() + kind as u32 * 97) % MIN_WATCH_TIMEOUT;
            let timeout = MIN_WATCH_TIMEOUT + spread;
            let params = WatchParams::default().timeout(timeout);
            let mut events = match api.watch(&params, &version).await {
                Ok(events) => events.boxed_local(),
                Err(e) => {
                    warn!("policy: WATCH {what}: {e}; listing again");
                    tokio::time::sleep(RETRY).await;
                    break;
                }
            };
            let silence = Duration::from_secs(u64::from(timeout) + 60);
            let relist = loop {
                let event = match tokio::time::timeout(silence, events.next()).await {
                    Ok(Some(Ok(event))) => event,
                    // The server closed the watch: watch again from where it stopped.
                    Ok(None) => break false,
                    Ok(Some(Err(e))) => {
                        warn!("policy: WATCH {what}: {e}; watching again");
                        tokio::time::sleep(RETRY).await;
                        break false;
                    }
                    Err(_) => {
                        warn!("policy: WATCH {what}: nothing for {silence:?}; watching again");
                        break false;
                    }
                };
                let update = match event {
                    WatchEvent::Added(o) | WatchEvent::Modified(o) => {
                        version = o.meta().resource_version.clone().unwrap_or(version);
                        Update::Changed(object_key(&o), convert(&o))
                    }
                    WatchEvent::Deleted(o) => {
                        version = o.meta().resource_version.clone().unwrap_or(version);
                        Update::Changed(object_key(&o), gone(kind))
                    }
                    WatchEvent::Bookmark(b) => {
                        version = b.metadata.resource_version;
                        continue;
                    }
                    WatchEvent::Error(status) => {
                        if status.code != 410 {
                            warn!(
                                "policy: WATCH {what}: {} ({}); listing again",
                                status.message, status.code
                            );
                        }
                        break true;
                    }
                };
                if tx.unbounded_send(update).is_err() {
                    return;
                }
            };
            if relist {
                break;
            }
        }
    }
}

/// Every object of the kind, and the version to watch from.
pub async fn list<K>(
    api: &Api<K>,
    convert: fn(&K) -> Object,
) -> Result<(Vec<(String, Object)>, String), String>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let mut objects = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut params = ListParams::default().limit(PAGE);
        if let Some(t) = &token {
            params = params.continue_token(t);
        }
        let page = tokio::time::timeout(REQUEST_TIMEOUT, api.list(&params))
            .await
            .map_err(|_| format!("no answer in {REQUEST_TIMEOUT:?}"))?
            .map_err(|e| e.to_string())?;
        objects.extend(page.items.iter().map(|o| (object_key(o), convert(o))));
        token = page.metadata.continue_.filter(|t| !t.is_empty());
        if token.is_none() {
            return Ok((objects, page.metadata.resource_version.unwrap_or_default()));
        }
    }
}

fn object_key<K: Resource>(o: &K) -> String {
    let meta = o.meta();
    key(
        meta.namespace.as_deref(),
        meta.name.as_deref().unwrap_or_default(),
    )
}

/// The "gone" object of a kind.
fn gone(kind: Kind) -> Object {
    match kind {
        Kind::Namespaces => Object::Namespace(None),
        Kind::Pods => Object::Pod(None),
        Kind::Policies => Object::Policy(None),
    }
}
