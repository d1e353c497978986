//! A response body that holds a reservation of the tenant's host memory
//! ([`HostReservation`]) until the connection has taken it (or is gone): an encoded
//! response counts against its tenant for as long as the server holds its bytes.

use axum::body::{Body, Bytes};
use http_body_util::{BodyExt, Full};

use crate::platform::HostReservation;

/// `bytes`, holding `reservation` while the server has them (its length stays the
/// body's exact size, so the response keeps its `Content-Length`).
pub fn held(bytes: Vec<u8>, reservation: HostReservation) -> Body {
    Body::new(Full::new(Bytes::from(bytes)).map_frame(move |frame| {
        let _held = &reservation;
        frame
    }))
}
