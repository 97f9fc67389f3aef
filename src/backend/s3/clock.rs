//! The store's own clock (SPEC §14: a lease is expired when the store says so, never by a
//! host's clock). Every response's `Date` header is kept, with the moment it arrived by
//! this process's monotonic clock; the store's time "now" is that date plus the time
//! elapsed since. The same wrapper refuses each attempt of a request made under a lease
//! with less than 5 s left ([`super::lease::refusal`]), so object_store retries nothing
//! then.

use object_store::client::{
    ClientOptions, HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse,
    HttpService, ReqwestConnector,
};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// The last `Date` the store sent, and when it arrived.
#[derive(Debug, Default, Clone)]
pub struct StoreClock(Arc<Mutex<Option<(Instant, SystemTime)>>>);

impl StoreClock {
    /// The store's time now, by its last `Date` header and the monotonic time since;
    /// `None` before any response carried one.
    pub fn now(&self) -> Option<SystemTime> {
        let seen = *self.0.lock().unwrap_or_else(|e| e.into_inner());
        seen.map(|(at, date)| date + at.elapsed())
    }

    /// Forgets what was seen (before a request whose own `Date` is wanted).
    pub fn reset(&self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    fn saw(&self, date: SystemTime) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some((Instant::now(), date));
    }
}

/// Makes object_store's usual HTTP client, wrapped to read the `Date` of each response.
#[derive(Debug)]
pub struct DateConnector(pub StoreClock);

impl HttpConnector for DateConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let inner = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(DateService {
            inner,
            clock: self.0.clone(),
        }))
    }
}

#[derive(Debug)]
struct DateService {
    inner: HttpClient,
    clock: StoreClock,
}

#[async_trait::async_trait]
impl HttpService for DateService {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        crate::failpoint::hit("s3_request");
        // Under a lease, no request is sent, nor retried, with less than 5 s left.
        if let Some(why) = super::lease::refusal() {
            return Err(HttpError::new(
                HttpErrorKind::Unknown,
                std::io::Error::other(why),
            ));
        }
        let response = self.inner.execute(req).await?;
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

    #[test]
    fn http_dates_parse() {
        let t = parse_http_date("Thu, 03 Dec 2026 20:33:53 GMT").unwrap();
        let secs = t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
        assert_eq!(secs, 1_796_330_033);
        assert!(parse_http_date("yesterday").is_none());
    }
}
