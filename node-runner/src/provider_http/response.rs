//! Reading a response: the head (skipping interim 1xx heads) and the body
//! stream, which hands out each decoded slice as soon as it is read.

use std::rc::Rc;

use bytes::{Buf, Bytes, BytesMut};
use framing::http::{
    BodyDecoder, BodyFraming, BodyItem, HeadLimits, Headers, HttpError, ResponseHead,
    parse_response_head,
};

use super::Inner;
use super::conn::Connection;
use super::error::ProviderError;
use super::pool::PoolKey;

/// How reading a head on one connection failed.
#[derive(Debug)]
pub(crate) enum HeadFailure {
    /// EOF or a socket error before any response byte: on a reused
    /// connection the provider closed it while idle, and the request may
    /// be sent again on a fresh one.
    NothingReceived(ProviderError),
    /// Anything else; final.
    Failed(ProviderError),
}

/// Reads until a final (non-1xx) response head is parsed from `conn`.
pub(crate) async fn read_head(
    conn: &mut Connection,
    inner: &Inner,
    head_request: bool,
) -> Result<ResponseHead, HeadFailure> {
    let mut received = false;
    loop {
        match parse_head_owned(conn, &inner.config.head_limits, head_request) {
            // 101 would switch protocols, which this client never asks for.
            Ok(Some(head)) if head.status() == 101 => {
                return Err(HeadFailure::Failed(ProviderError::MalformedHead(
                    framing::http::HttpError::InvalidStatus,
                )));
            }
            Ok(Some(head)) if head.status() < 200 => continue,
            Ok(Some(head)) => return Ok(head),
            Ok(None) => {}
            Err(error) => return Err(HeadFailure::Failed(ProviderError::head(error))),
        }
        match conn.read_more().await {
            Ok(0) if !received => {
                return Err(HeadFailure::NothingReceived(
                    ProviderError::ClosedBeforeResponse,
                ));
            }
            Ok(0) => return Err(HeadFailure::Failed(ProviderError::ClosedBeforeResponse)),
            Ok(_) => received = true,
            Err(error) if !received => {
                return Err(HeadFailure::NothingReceived(ProviderError::io(&error)));
            }
            Err(error) => return Err(HeadFailure::Failed(ProviderError::io(&error))),
        }
    }
}

/// Parses a head from a right-sized copy of the received bytes and, when
/// one is complete, consumes it from the receive buffer. The head lives as
/// long as the response, and a head sliced from the receive buffer would
/// pin that whole buffer for the stream's life, so that an idle stream
/// could never release it (see `conn`). One copy of a few hundred bytes
/// a response; the body stays zero-copy.
fn parse_head_owned(
    conn: &mut Connection,
    limits: &HeadLimits,
    head_request: bool,
) -> Result<Option<ResponseHead>, HttpError> {
    // One byte past the limit keeps "head too large" exactly as on the
    // whole buffer.
    let window = conn.buf.len().min(limits.effective_head_bytes() + 1);
    let mut copy = BytesMut::from(&conn.buf[..window]);
    let head = parse_response_head(&mut copy, limits, head_request)?;
    if head.is_some() {
        conn.buf.advance(window - copy.len());
    }
    Ok(head)
}

/// A provider's response: the final head, then the body as a stream of
/// zero-copy [`Bytes`] slices of the receive buffer.
///
/// Reading the body to its end (until [`ProviderResponse::next_chunk`]
/// returns `None`) parks the connection in the pool when keep-alive allows.
/// Dropping the response before that closes the connection: the provider
/// sees the client go away.
#[derive(Debug)]
pub struct ProviderResponse {
    head: ResponseHead,
    decoder: BodyDecoder,
    conn: Option<Connection>,
    eof: bool,
    key: PoolKey,
    inner: Rc<Inner>,
}

impl ProviderResponse {
    pub(crate) fn new(
        head: ResponseHead,
        conn: Connection,
        key: PoolKey,
        inner: Rc<Inner>,
    ) -> Self {
        let mut response = Self {
            decoder: BodyDecoder::new(head.body()),
            head,
            conn: Some(conn),
            eof: false,
            key,
            inner,
        };
        if response.head.body() == BodyFraming::Empty {
            // Nothing to read: release the connection at once, so a caller
            // that never polls the body does not cost a connection.
            response.finish();
        }
        response
    }

    /// The status code (final, never 1xx).
    pub fn status(&self) -> u16 {
        self.head.status()
    }

    /// The header fields.
    pub fn headers(&self) -> &Headers {
        self.head.headers()
    }

    /// The whole parsed head (version, reason, framing, raw bytes).
    pub fn head(&self) -> &ResponseHead {
        &self.head
    }

    /// True once the body ended, failed, or was never there: the
    /// connection has been released (pooled or closed).
    pub fn is_done(&self) -> bool {
        self.conn.is_none()
    }

    /// The next piece of the body, as soon as its bytes are read: a slice
    /// split off the receive buffer (chunked framing removed), never
    /// accumulated. `None` after the end or after an error.
    ///
    /// Errors: [`ProviderError::BodyTruncated`] when the provider closes
    /// before the body's end, [`ProviderError::MalformedBody`] for broken
    /// chunked framing, [`ProviderError::Io`] for a socket error,
    /// [`ProviderError::Cancelled`] after an earlier call's future was
    /// dropped mid-read (this future is otherwise cancel-safe). No body
    /// idle timeout is applied here: stalls are the run watchdog's.
    pub async fn next_chunk(&mut self) -> Option<Result<Bytes, ProviderError>> {
        loop {
            if let Some(item) = self.next_chunk_now() {
                return item;
            }
            // `next_chunk_now` answers itself whenever there is no connection.
            let conn = self.conn.as_mut()?;
            match conn.read_more().await {
                Ok(0) => self.eof = true,
                Ok(_) => {}
                Err(error) => {
                    self.conn = None;
                    return Some(Err(ProviderError::io(&error)));
                }
            }
        }
    }

    /// What [`ProviderResponse::next_chunk`] would return if the answer
    /// needs no socket read: the next piece when the receive buffer holds
    /// it whole, or the body's end, or an error already known. `None` when
    /// the next piece needs a read (nothing is read here).
    pub fn next_chunk_now(&mut self) -> Option<Option<Result<Bytes, ProviderError>>> {
        let Some(conn) = self.conn.as_mut() else {
            return Some(None);
        };
        if !conn.is_clean() {
            self.conn = None;
            return Some(Some(Err(ProviderError::Cancelled)));
        }
        let item = if self.eof {
            self.decoder.decode_eof(&mut conn.buf)
        } else {
            self.decoder.decode(&mut conn.buf)
        };
        match item {
            Ok(Some(BodyItem::Data(data))) => Some(Some(Ok(data))),
            Ok(Some(BodyItem::End)) => {
                self.finish();
                Some(None)
            }
            // `decode_eof` only says "nothing more" after its `End`.
            Ok(None) if self.eof => {
                self.conn = None;
                Some(None)
            }
            Ok(None) => None,
            Err(error) => {
                self.conn = None;
                Some(Some(Err(ProviderError::body(error))))
            }
        }
    }

    /// Address range of the bytes the last socket read delivered (zero-copy
    /// tests).
    #[cfg(test)]
    pub(crate) fn last_read(&self) -> Option<std::ops::Range<usize>> {
        self.conn.as_ref().map(|c| c.last_read.clone())
    }

    /// The connection's `SO_RCVBUF` (the receive-buffer test).
    #[cfg(test)]
    pub(crate) fn socket_receive_buffer(&self) -> Option<std::io::Result<usize>> {
        self.conn
            .as_ref()
            .map(super::conn::Connection::socket_receive_buffer)
    }

    /// The receive buffer's capacity (the buffer-release tests).
    #[cfg(test)]
    pub(crate) fn buffer_capacity(&self) -> Option<usize> {
        self.conn
            .as_ref()
            .map(super::conn::Connection::buffer_capacity)
    }

    /// Releases the connection after the body's end (or at once for a
    /// response without a body): back to the pool when
    /// both sides keep it alive, nothing stray follows the body and no
    /// operation was abandoned; closed otherwise.
    fn finish(&mut self) {
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        let reusable =
            self.head.keep_alive() && !self.eof && conn.buf.is_empty() && conn.is_clean();
        if reusable {
            conn.reused = true;
            // An idle pooled connection holds no receive buffer either.
            conn.release_buffer();
            let now = self.inner.clock.refresh();
            let key = self.key.clone();
            self.inner.pool.borrow_mut().checkin(key, conn, now);
        }
    }
}
