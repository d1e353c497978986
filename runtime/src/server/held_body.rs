//! A response body that holds a reservation of the tenant's host memory
//! ([`HostReservation`]) until the connection has taken it (or is gone): an encoded
//! response counts against its tenant for as long as the server holds its bytes.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use http_body::{Frame, SizeHint};

use crate::platform::HostReservation;

/// `bytes`, holding `reservation` while the server has them (its exact size keeps the
/// response's `Content-Length`).
pub fn held(bytes: Vec<u8>, reservation: HostReservation) -> Body {
    Body::new(Held { data: Some(Bytes::from(bytes)), _reservation: reservation })
}

struct Held {
    data: Option<Bytes>,
    _reservation: HostReservation,
}

impl http_body::Body for Held {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.data.take().map(|d| Ok(Frame::data(d))))
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.data.as_ref().map_or(0, |d| d.len() as u64))
    }
}
