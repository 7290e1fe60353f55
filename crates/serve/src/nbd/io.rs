//! Sockets of either family behind one type, and the buffered reader the handshake and the
//! transmission phase share (so bytes a client sent ahead are not lost between the two).

use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;

/// A connected socket: TCP or Unix.
pub enum Sock {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Sock {
    pub fn try_clone(&self) -> io::Result<Sock> {
        Ok(match self {
            Sock::Tcp(s) => Sock::Tcp(s.try_clone()?),
            Sock::Unix(s) => Sock::Unix(s.try_clone()?),
        })
    }

    /// Shuts a direction down; errors (the peer already gone) are of no interest to callers,
    /// which only want the other threads on the socket to wake up.
    pub fn shutdown(&self, how: Shutdown) {
        let _ = match self {
            Sock::Tcp(s) => s.shutdown(how),
            Sock::Unix(s) => s.shutdown(how),
        };
    }

    /// Writes as much of `bufs` as the socket takes now, without blocking: the reply path of
    /// reactor threads, which must never wait for a slow client.
    pub fn send_nonblocking(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let flags = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
        match self {
            Sock::Tcp(s) => socket2::SockRef::from(s).send_vectored_with_flags(bufs, flags),
            Sock::Unix(s) => socket2::SockRef::from(s).send_vectored_with_flags(bufs, flags),
        }
    }

    /// Writes all of `bufs`, blocking as long as it takes.
    pub fn send_blocking(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let flags = libc::MSG_NOSIGNAL;
        match self {
            Sock::Tcp(s) => socket2::SockRef::from(s).send_vectored_with_flags(bufs, flags),
            Sock::Unix(s) => socket2::SockRef::from(s).send_vectored_with_flags(bufs, flags),
        }
    }

    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Sock::Tcp(s) => s.as_fd(),
            Sock::Unix(s) => s.as_fd(),
        }
    }

    /// Reads what the socket has now into `buf`, without blocking (the reactors' receive
    /// path): `Ok(0)` at the end of the stream, `WouldBlock` when nothing is there.
    pub fn recv_nonblocking(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match rustix::net::recv(self.fd(), &mut *buf, rustix::net::RecvFlags::DONTWAIT) {
                Ok((n, _)) => return Ok(n),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Appends to `v` what the socket has now, at most `max` bytes, without blocking and
    /// without zeroing the vector's spare capacity first (a large write's payload).
    pub fn recv_append_nonblocking(&self, v: &mut Vec<u8>, max: usize) -> io::Result<usize> {
        v.reserve(max);
        let room = v.capacity() - v.len();
        if room > max {
            // Read at most `max` bytes: the rest of the stream belongs to the next request.
            let mut tail = vec![0u8; max];
            let n = self.recv_nonblocking(&mut tail)?;
            v.extend_from_slice(&tail[..n]);
            return Ok(n);
        }
        loop {
            let flags = rustix::net::RecvFlags::DONTWAIT;
            match rustix::net::recv(self.fd(), rustix::buffer::spare_capacity(v), flags) {
                Ok((n, _)) => return Ok(n),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Blocks until the socket has something to read (or its end, or an error): the doorbell
    /// of an idle connection. Reads nothing.
    pub fn wait_readable(&self) -> io::Result<()> {
        let mut b = [0u8; 1];
        loop {
            match rustix::net::recv(self.fd(), &mut b[..], rustix::net::RecvFlags::PEEK) {
                Ok(_) => return Ok(()),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    pub fn write_all(&self, buf: &[u8]) -> io::Result<()> {
        match self {
            Sock::Tcp(s) => (&*s).write_all(buf),
            Sock::Unix(s) => (&*s).write_all(buf),
        }
    }

    pub fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let r = match self {
                Sock::Tcp(s) => (&*s).read(buf),
                Sock::Unix(s) => (&*s).read(buf),
            };
            match r {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => return r,
            }
        }
    }
}

/// A read buffer over a socket: blocking exact-length reads for the handshake, non-blocking
/// fills for the reactor's poller in the transmission phase.
pub struct InBuf {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

/// The connection ended cleanly at a message boundary (the peer closed, or a shutdown of our
/// reading side by `stop()`).
pub fn is_eof(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::UnexpectedEof
}

impl InBuf {
    pub fn new(capacity: usize) -> InBuf {
        InBuf { buf: vec![0; capacity], start: 0, end: 0 }
    }

    pub fn buffered(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    pub fn consume(&mut self, n: usize) {
        self.start += n;
        debug_assert!(self.start <= self.end);
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// One read from the socket into the free space (moving what is buffered to the front
    /// first); returns the bytes read, 0 at end of stream.
    pub fn fill(&mut self, sock: &Sock) -> io::Result<usize> {
        self.compact();
        if self.end == self.buf.len() {
            return Err(io::Error::other("read buffer full"));
        }
        let n = sock.read(&mut self.buf[self.end..])?;
        self.end += n;
        Ok(n)
    }

    /// One non-blocking read into the free space (moving what is buffered to the front
    /// first); `Ok(0)` at the end of the stream, `WouldBlock` when nothing is there.
    pub fn fill_nonblocking(&mut self, sock: &Sock) -> io::Result<usize> {
        self.compact();
        if self.end == self.buf.len() {
            return Err(io::Error::other("read buffer full"));
        }
        let n = sock.recv_nonblocking(&mut self.buf[self.end..])?;
        self.end += n;
        Ok(n)
    }

    fn compact(&mut self) {
        if self.start > 0 && (self.end == self.buf.len() || self.start > self.buf.len() / 2) {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
    }

    /// Fills `dst` exactly: buffered bytes first, then reads straight into `dst`.
    pub fn read_exact(&mut self, sock: &Sock, dst: &mut [u8]) -> io::Result<()> {
        let have = (self.end - self.start).min(dst.len());
        dst[..have].copy_from_slice(&self.buf[self.start..self.start + have]);
        self.consume(have);
        let mut at = have;
        while at < dst.len() {
            if dst.len() - at < self.buf.len() / 4 {
                // A short remainder: read it through the buffer, which may also catch the
                // requests that follow it in the same system call.
                self.ensure(sock, dst.len() - at)?;
                let n = dst.len() - at;
                dst[at..].copy_from_slice(&self.buf[self.start..self.start + n]);
                self.consume(n);
                return Ok(());
            }
            let n = sock.read(&mut dst[at..])?;
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            at += n;
        }
        Ok(())
    }

    /// Makes sure at least `n` bytes (at most the capacity) are buffered.
    pub fn ensure(&mut self, sock: &Sock, n: usize) -> io::Result<()> {
        debug_assert!(n <= self.buf.len());
        while self.end - self.start < n {
            if self.start > 0 && self.buf.len() - self.start < n {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.fill(sock)? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
        Ok(())
    }

    pub fn read_u32(&mut self, sock: &Sock) -> io::Result<u32> {
        let mut b = [0u8; 4];
        self.read_exact(sock, &mut b)?;
        Ok(u32::from_be_bytes(b))
    }

    pub fn read_u64(&mut self, sock: &Sock) -> io::Result<u64> {
        let mut b = [0u8; 8];
        self.read_exact(sock, &mut b)?;
        Ok(u64::from_be_bytes(b))
    }
}
