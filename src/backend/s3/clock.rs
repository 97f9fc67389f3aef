//! The store's own clock (SPEC §14: a lease is expired when the store says so, never by a
//! host's clock). Every response's `Date` header is kept, with the moment it arrived by
//! this process's monotonic clock; the store's time "now" is that date plus the time
//! elapsed since. The same wrapper refuses each attempt of a request made under a lease
//! with less than 5 s left ([`super::lease::refusal`]), so object_store retries nothing
//! then.
//!
//! It also says when a store cannot be reached at all: before any response has come from
//! it, a request that could not connect is tried [`FIRST_CONTACT_ATTEMPTS`] times, then
//! fails with [`Unreachable`] instead of going through object_store's whole retry budget
//! (minutes). Once the store has answered, a failed connection is retried as usual: that
//! is a hiccup, not a wrong endpoint.

use bytes::Bytes;
use object_store::client::{
    ClientOptions, HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse,
    HttpService, ReqwestConnector,
};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// The last `Date` the store sent, and when it arrived.
#[derive(Debug, Default, Clone)]
pub(crate) struct StoreClock(Arc<Mutex<Option<(Instant, SystemTime)>>>);

impl StoreClock {
    /// The store's time now, by its last `Date` header and the monotonic time since;
    /// `None` before any response carried one.
    pub(crate) fn now(&self) -> Option<SystemTime> {
        let seen = *self.0.lock().unwrap_or_else(|e| e.into_inner());
        seen.map(|(at, date)| date + at.elapsed())
    }

    /// Forgets what was seen (before a request whose own `Date` is wanted).
    pub(crate) fn reset(&self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    fn saw(&self, date: SystemTime) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some((Instant::now(), date));
    }
}

/// How many times a request that cannot connect is tried before the store has ever
/// answered (object_store waits about 0.1, then 0.2 s between them).
const FIRST_CONTACT_ATTEMPTS: u32 = 3;

/// A store distributor could not connect to at all: no response ever came from it.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot reach the store at {url} ({cause}); nothing was written. Check {fix}, that the service is running, and that this host can connect to it (firewall, proxy: HTTPS_PROXY, NO_PROXY)"
)]
pub(crate) struct Unreachable {
    /// Where the requests went: scheme, host and port.
    url: String,
    /// Why the connection failed, in the HTTP client's words.
    cause: String,
    /// What names that address.
    fix: &'static str,
}

/// What a store's dialect adds to a request once object_store has built and signed it,
/// just before it is sent (azure: `Content-MD5` on every PUT body, signed again).
pub(crate) trait Prepare: std::fmt::Debug + Send + Sync {
    /// Whether `req` is to be prepared (its body is then read into memory).
    fn wants(&self, req: &HttpRequest) -> bool;

    /// Changes `req`, whose body is `body`.
    fn prepare(&self, req: &mut HttpRequest, body: &Bytes) -> Result<(), HttpError>;
}

/// Makes object_store's usual HTTP client, wrapped to read the `Date` of each response.
#[derive(Debug)]
pub(crate) struct DateConnector {
    clock: StoreClock,
    /// What names the store's address, for [`Unreachable`]'s advice.
    fix: &'static str,
    prepare: Option<Arc<dyn Prepare>>,
}

impl DateConnector {
    /// The connector of one object-store client; `fix` says which settings name the
    /// store's address ("s3.endpoint (AWS_ENDPOINT_URL overrides it when set)").
    pub(crate) fn new(clock: StoreClock, fix: &'static str) -> DateConnector {
        DateConnector {
            clock,
            fix,
            prepare: None,
        }
    }

    /// The same connector, every request it sends first passed through `prepare`.
    pub(crate) fn preparing(mut self, prepare: Arc<dyn Prepare>) -> DateConnector {
        self.prepare = Some(prepare);
        self
    }
}

impl HttpConnector for DateConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let inner = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(DateService {
            inner,
            clock: self.clock.clone(),
            fix: self.fix,
            prepare: self.prepare.clone(),
            answered: AtomicBool::new(false),
            failed_connects: AtomicU32::new(0),
        }))
    }
}

#[derive(Debug)]
struct DateService {
    inner: HttpClient,
    clock: StoreClock,
    fix: &'static str,
    prepare: Option<Arc<dyn Prepare>>,
    /// Some response has come from the store.
    answered: AtomicBool,
    /// Requests that could not connect before any response came.
    failed_connects: AtomicU32,
}

impl DateService {
    /// A connection failure before the store ever answered: after
    /// [`FIRST_CONTACT_ATTEMPTS`], [`Unreachable`], which object_store does not retry.
    fn first_contact_failure(&self, url: String, e: HttpError) -> HttpError {
        if self.answered.load(Ordering::Relaxed) || e.kind() != HttpErrorKind::Connect {
            return e;
        }
        if self.failed_connects.fetch_add(1, Ordering::Relaxed) + 1 < FIRST_CONTACT_ATTEMPTS {
            return e;
        }
        let cause = innermost(&e);
        let fix = self.fix;
        HttpError::new(
            HttpErrorKind::Unknown,
            Unreachable {
                url,
                cause: super::credentials::without_metadata_address(&cause),
                fix,
            },
        )
    }
}

/// A connection that could not be made in time, as an error object_store retries.
///
/// reqwest calls a connect timeout a timeout first, and object_store retries a timed-out
/// request only when it is idempotent; a conditional PUT (a lease taken, a state written
/// `If-Match`) is not. But a request whose connection was never made was never sent, so
/// trying it again cannot apply it twice: it is [`HttpErrorKind::Connect`], which
/// object_store retries like a refused connection. Under a loaded host a store on this
/// machine can take longer than object_store's 5 s to accept a connection.
fn never_sent(e: HttpError) -> HttpError {
    if e.kind() != HttpErrorKind::Timeout
        || !super::find_source::<reqwest::Error>(&e).is_some_and(reqwest::Error::is_connect)
    {
        return e;
    }
    let cause = innermost(&e);
    HttpError::new(HttpErrorKind::Connect, NotConnected { cause })
}

/// A connection not made in time (the request was never sent), with the HTTP client's
/// innermost words for it ("deadline has elapsed").
#[derive(Debug, thiserror::Error)]
#[error("no connection within the connect timeout ({cause})")]
struct NotConnected {
    cause: String,
}

/// The innermost cause of `e` (for reqwest: "Connection refused (os error 111)" rather
/// than "error sending request"), on one line.
pub(crate) fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut last = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        last = s.to_string();
        source = s.source();
    }
    last.lines().next().unwrap_or_default().to_string()
}

#[async_trait::async_trait]
impl HttpService for DateService {
    async fn call(&self, mut req: HttpRequest) -> Result<HttpResponse, HttpError> {
        crate::failpoint::hit("s3_request");
        // Under a lease, no request is sent, nor retried, with less than 5 s left.
        if let Some(why) = super::lease::refusal() {
            return Err(HttpError::new(
                HttpErrorKind::Unknown,
                std::io::Error::other(why),
            ));
        }
        if let Some(p) = &self.prepare
            && p.wants(&req)
        {
            // Bodies are in memory already (one PUT of at most 8 MiB, or one block).
            let body = http_body_util::BodyExt::collect(req.body().clone())
                .await?
                .to_bytes();
            p.prepare(&mut req, &body)?;
            *req.body_mut() = body.into();
        }
        let uri = req.uri();
        let url = format!(
            "{}://{}",
            uri.scheme_str().unwrap_or("https"),
            uri.authority().map(|a| a.as_str()).unwrap_or_default()
        );
        let response = match self.inner.execute(req).await {
            Ok(r) => r,
            Err(e) => return Err(self.first_contact_failure(url, never_sent(e))),
        };
        self.answered.store(true, Ordering::Relaxed);
        crate::failpoint::hit("s3_response");
        if let Some(date) = response
            .headers()
            .get("date")
            .and_then(|v| v.to_str().ok())
            .and_then(parse_http_date)
        {
            self.clock.saw(date);
        }
        Ok(response)
    }
}

/// An HTTP date (`Thu, 03 Dec 2026 20:33:53 GMT`).
fn parse_http_date(s: &str) -> Option<SystemTime> {
    let t = chrono::DateTime::parse_from_rfc2822(s).ok()?;
    let secs = u64::try_from(t.timestamp()).ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ObjectStore;

    #[test]
    fn http_dates_parse() {
        let t = parse_http_date("Thu, 03 Dec 2026 20:33:53 GMT").unwrap();
        let secs = t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
        assert_eq!(secs, 1_796_330_033);
        assert!(parse_http_date("yesterday").is_none());
    }

    /// A listener on 127.0.0.1 that completes no more connections (its accept queue is
    /// full and nothing accepts), and the connections that filled it.
    fn full_listener() -> (
        std::net::SocketAddr,
        tokio::net::TcpListener,
        Vec<std::net::TcpStream>,
    ) {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let listener = socket.listen(0).unwrap();
        let addr = listener.local_addr().unwrap();
        let mut held = Vec::new();
        for _ in 0..16 {
            match std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(300)) {
                Ok(s) => held.push(s),
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                    return (addr, listener, held);
                }
                Err(e) => panic!("connect to {addr}: {e}"),
            }
        }
        panic!("{addr} still completes connections after 16 that were never accepted");
    }

    #[test]
    fn a_conditional_put_whose_connection_is_not_made_in_time_is_tried_again() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (addr, _listener, _held) = full_listener();
            let store = object_store::aws::AmazonS3Builder::new()
                .with_bucket_name("b")
                .with_region("us-east-1")
                .with_endpoint(format!("http://{addr}"))
                .with_access_key_id("k")
                .with_secret_access_key("s")
                .with_client_options(
                    ClientOptions::new()
                        .with_allow_http(true)
                        .with_connect_timeout(Duration::from_millis(200)),
                )
                .with_http_connector(DateConnector::new(StoreClock::default(), "s3.endpoint"))
                .build()
                .unwrap();
            // Create-only, as a lease is taken: not idempotent, so object_store retries it
            // only after errors that say it was never sent.
            let key = object_store::path::Path::from("site/.distributor.lock");
            let put = store.put_opts(
                &key,
                object_store::PutPayload::from_static(b"{}"),
                object_store::PutMode::Create.into(),
            );
            let e = put.await.expect_err("nothing accepts the connection");
            // Tried FIRST_CONTACT_ATTEMPTS times, then called unreachable; a connect
            // timeout taken for a response timeout ends after one attempt, with object_store's
            // "error sending request".
            let unreachable = crate::backend::s3::find_source::<Unreachable>(&e)
                .unwrap_or_else(|| panic!("not retried to the end: {e}"));
            let text = unreachable.to_string();
            assert!(text.contains(&addr.to_string()), "{text}");
            assert!(
                text.contains("no connection within the connect timeout"),
                "{text}"
            );
        });
    }
}
