//! The feed's listening session: a connection of its own (not pooled), driven by a task
//! that turns each notification on the fleet's channel into a wake-up and sends `LISTEN` or
//! `UNLISTEN` as the feed asks (`Listener::want`). What became of the session (it listens,
//! it ended, the server refused to listen) is read from its wake-ups, so the feed can tell a
//! session that worked and was cut from one the server will not give it. Across sessions
//! (`Listening`), the feed backs off when the server will not let it listen.

use std::task::Poll;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::mpsc;
use tokio_postgres::AsyncMessage;
use tracing::{info, warn};

use super::statements::CHANNEL;
use super::Postgres;
use crate::store::StoreError;

/// After the server refuses to listen, or the listening connection cannot be opened while
/// reads work (a connection limit, say), the feed asks again this long after, doubling up
/// to `LISTEN_RETRY_MAX`, and reads on its poll meanwhile: a new session per read would be
/// a connection a read.
const LISTEN_RETRY_MIN: Duration = Duration::from_secs(1);
const LISTEN_RETRY_MAX: Duration = Duration::from_secs(60);

/// When to try to listen again.
struct Backoff {
    /// Not before this.
    until: std::time::Instant,
    /// The wait after the next failure.
    next: Duration,
}

/// The feed's listening across sessions: the session up, and when to try again after the
/// server would not let it listen.
#[derive(Default)]
pub(super) struct Listening {
    session: Option<Listener>,
    /// Listening failed: when to try again.
    backoff: Option<Backoff>,
    /// The session could not be opened, or ended before it listened: a failure to listen
    /// if the read after it works, else the database is away (and the follower says so).
    unopened: Option<String>,
}

impl Listening {
    /// The session, connected if it is not up, unless listening failed too recently.
    pub(super) fn session(&mut self, pg: &Postgres) -> Option<&mut Listener> {
        let waiting = self
            .backoff
            .as_ref()
            .is_some_and(|b| std::time::Instant::now() < b.until);
        if self.session.is_none() && !waiting {
            match Listener::connect(pg) {
                Ok(l) => self.session = Some(l),
                Err(e) => self.unopened = Some(e.to_string()),
            }
        }
        self.session.as_mut()
    }

    /// What the session's wake-ups said: it listens (after a failure, say so once), or it
    /// ended (a refusal counts once the read after it works: `read_done`).
    pub(super) fn settle(&mut self) {
        let Some(l) = self.session.as_mut() else {
            return;
        };
        if l.listened() && self.backoff.take().is_some() {
            info!("listening for the fleet's changes again: they arrive as they commit");
        }
        let Some(ended) = l.ended() else {
            return;
        };
        self.session = None;
        if let Some(why) = ended {
            self.unopened = Some(why);
        }
    }

    /// The read after a wait `worked`, or failed: the database itself is away, its session
    /// may be a dead connection that has not noticed yet, and once it is back the feed
    /// listens again at once.
    pub(super) fn read_done(&mut self, worked: bool) {
        if !worked {
            *self = Listening::default();
            return;
        }
        let Some(why) = self.unopened.take() else {
            return;
        };
        // Listening failed: read on the poll, try again after the back-off (said once).
        let next = self.backoff.as_ref().map_or(LISTEN_RETRY_MIN, |b| b.next);
        if self.backoff.is_none() {
            warn!(
                error = %why,
                "cannot listen for the fleet's changes: they are read on the follower's poll instead (later), and listening is tried again with back-off"
            );
        }
        self.backoff = Some(Backoff {
            until: std::time::Instant::now() + next,
            next: (next * 2).min(LISTEN_RETRY_MAX),
        });
    }
}

/// What the session's task tells the feed.
enum Wake {
    /// Its `LISTEN` took effect: whatever was committed before is read once.
    Listening,
    Notified,
    /// The server refused `LISTEN` or `UNLISTEN` (a hot standby, a pooler that does not
    /// pass notifications on); the session ends.
    Refused(String),
}

/// What woke the session's task.
enum Woke {
    /// Its `LISTEN` (true) or `UNLISTEN` (false) finished: the server's refusal, if any
    /// (`None`: no answer, the connection failed).
    Done(bool, Result<(), Option<String>>),
    /// The feed asks to listen or not; `None`: the feed is gone.
    Ctl(Option<bool>),
    Notified,
    /// Another message from the server.
    Other,
    /// The connection ended.
    Ended,
}

pub(super) struct Listener {
    rx: mpsc::UnboundedReceiver<Wake>,
    ctl: mpsc::UnboundedSender<bool>,
    /// What the session was last asked: to listen, or not (in a stream).
    on: bool,
    /// A `LISTEN` of this session took effect since the feed last asked (`listened`).
    listened: bool,
    /// One ever took effect on this session.
    confirmed: bool,
    /// The session ended; with the server's refusal when that is why.
    ended: Option<Option<String>>,
}

impl Listener {
    /// Connect and listen. The whole of it is bounded (`super::WAIT`): a server that takes
    /// the connection and then never answers must not hold the follower.
    pub(super) fn connect(pg: &Postgres) -> Result<Listener, StoreError> {
        let pg2 = pg.clone();
        let (rx, ctl) = pg.block(async {
            let tls = pg2.target().connector()?;
            let connecting = pg2.target().config().connect(tls);
            let (client, conn) = match tokio::time::timeout(super::WAIT, connecting).await {
                Ok(c) => c.map_err(|e| pg2.err(e))?,
                Err(_) => {
                    return Err(StoreError::Unavailable {
                        target: pg2.target().describe(),
                        why: format!(
                            "no answer within {}",
                            humantime::format_duration(super::WAIT)
                        ),
                    })
                }
            };
            let (tx, rx) = mpsc::unbounded_channel();
            let (ctl, ctl_rx) = mpsc::unbounded_channel::<bool>();
            tokio::spawn(session(client, conn, tx, ctl_rx));
            Ok::<_, StoreError>((rx, ctl))
        })?;
        Ok(Listener {
            rx,
            ctl,
            on: true,
            listened: false,
            confirmed: false,
            ended: None,
        })
    }

    pub(super) fn want(&mut self, on: bool) {
        if self.on != on {
            // A closed session is seen at the next wait.
            let _ = self.ctl.send(on);
            self.on = on;
        }
    }

    /// Wait up to `wait` for a wake-up (or the session's end); whether one came.
    pub(super) async fn woken(&mut self, wait: Duration) -> bool {
        match tokio::time::timeout(wait, self.rx.recv()).await {
            Ok(Some(w)) => {
                self.note(w);
                true
            }
            Ok(None) => {
                self.ended.get_or_insert(None);
                true
            }
            Err(_) => false,
        }
    }

    /// Take every wake-up waiting.
    pub(super) fn drain(&mut self) {
        loop {
            match self.rx.try_recv() {
                Ok(w) => self.note(w),
                Err(mpsc::error::TryRecvError::Empty) => return,
                Err(mpsc::error::TryRecvError::Disconnected) => {
                    self.ended.get_or_insert(None);
                    return;
                }
            }
        }
    }

    fn note(&mut self, w: Wake) {
        match w {
            Wake::Listening => {
                self.listened = true;
                self.confirmed = true;
            }
            Wake::Notified => {}
            Wake::Refused(why) => self.ended = Some(Some(why)),
        }
    }

    /// Whether a `LISTEN` took effect since the last ask.
    pub(super) fn listened(&mut self) -> bool {
        std::mem::take(&mut self.listened)
    }

    /// Whether the session ended: `Some(Some(why))` when the server refused to listen, or
    /// the session ended before it ever listened (a pooler that drops a connection on
    /// `LISTEN`): a new session at once would end the same way.
    pub(super) fn ended(&mut self) -> Option<Option<String>> {
        let ended = self.ended.take()?;
        Some(ended.or_else(|| {
            (!self.confirmed).then(|| "the connection ended before LISTEN took effect".into())
        }))
    }

    /// Whether the session has ended (`ended` not taken yet).
    pub(super) fn is_ended(&self) -> bool {
        self.ended.is_some()
    }
}

/// The server's refusal in `e`, if it is one: an error the server answered that is not
/// the end of the session (a shutdown, a terminated backend: class 57P, or a protocol
/// failure: class 08), which the next session gets past.
fn refusal(e: &tokio_postgres::Error) -> Option<String> {
    let db = e.as_db_error()?;
    let code = db.code().code();
    match code.starts_with("57P") || code.starts_with("08") {
        true => None,
        false => Some(crate::store::pg_message(e)),
    }
}

/// The session's task: the client lives in here (dropping it would close the connection).
async fn session<S, T>(
    client: tokio_postgres::Client,
    mut conn: tokio_postgres::Connection<S, T>,
    tx: mpsc::UnboundedSender<Wake>,
    mut ctl_rx: mpsc::UnboundedReceiver<bool>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (listen, unlisten) = (format!("LISTEN {CHANNEL}"), format!("UNLISTEN {CHANNEL}"));
    let sql = |on: bool| {
        if on {
            listen.as_str()
        } else {
            unlisten.as_str()
        }
    };
    let mut cmd: Option<(bool, BoxFuture<'_, Result<(), tokio_postgres::Error>>)> =
        Some((true, Box::pin(client.batch_execute(sql(true)))));
    loop {
        let woke = std::future::poll_fn(|cx| {
            if let Some((on, f)) = cmd.as_mut() {
                if let Poll::Ready(r) = f.as_mut().poll(cx) {
                    let on = *on;
                    cmd = None;
                    let r = r.map_err(|e| refusal(&e));
                    return Poll::Ready(Woke::Done(on, r));
                }
            } else if let Poll::Ready(c) = ctl_rx.poll_recv(cx) {
                return Poll::Ready(Woke::Ctl(c));
            }
            conn.poll_message(cx).map(|m| match m {
                Some(Ok(AsyncMessage::Notification(_))) => Woke::Notified,
                Some(Ok(_)) => Woke::Other,
                Some(Err(_)) | None => Woke::Ended,
            })
        })
        .await;
        let wake = match woke {
            Woke::Done(true, Ok(())) => Wake::Listening,
            Woke::Done(false, Ok(())) => continue,
            Woke::Done(_, Err(Some(why))) => {
                let _ = tx.send(Wake::Refused(why));
                return;
            }
            Woke::Ctl(Some(on)) => {
                cmd = Some((on, Box::pin(client.batch_execute(sql(on)))));
                continue;
            }
            Woke::Notified => Wake::Notified,
            Woke::Other => continue,
            // The feed gone, or the connection ended: the receiver sees the channel close.
            Woke::Done(_, Err(None)) | Woke::Ctl(None) | Woke::Ended => return,
        };
        if tx.send(wake).is_err() {
            return;
        }
    }
}
