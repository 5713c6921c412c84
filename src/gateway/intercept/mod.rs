//! HTTPS seen from inside (docs/intercept.md). A CONNECT, or a SOCKS5 CONNECT, to a host
//! and port the gateway intercepts is answered at once; the client's TLS ends here under a
//! leaf of this install's CA, and every request inside goes out as an absolute-form one
//! does: through an upstream, then TLS to the origin, verified, its answer judged by
//! `ban_status`, `retry_status` and the `[[ban]]` rules. Files: `rewound` (bytes read
//! ahead of the handshake, put back), `client` (the client's side), `upgrade` (a WebSocket relayed once the origin agrees); the
//! origin's side is the gateway's `origin` and `secure`, what both share `interception`.

mod client;
mod rewound;
mod upgrade;

pub(super) use client::serve;
