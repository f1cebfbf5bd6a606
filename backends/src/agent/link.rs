//! The engine's end of one agent connection (tokio): hello, then one run streamed into an
//! output sink.

use std::path::Path;

use paddock_agent::protocol::{
    self, FilesRequest, FrameKind, PROTOCOL_VERSION, ProtocolError, Reply, Request, RunRequest,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

use crate::remote::OutputSink;

/// Stdin is sent in frames of at most this many bytes.
const STDIN_CHUNK: usize = 1024 * 1024;
/// How long an agent that accepted a connection may take to say hello (it answers at once;
/// the kernel accepts for a stopped or hung agent too, which would otherwise hold the caller).
pub const HELLO_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// What can go wrong on a connection.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// Nothing listens (no socket file, or a dead agent's): start one.
    #[error("no agent listens on the socket: {0}")]
    NotListening(std::io::Error),
    /// The agent answered with another protocol version: replace it.
    #[error("the agent speaks protocol {found} (agent {agent}), this engine {PROTOCOL_VERSION}")]
    Version { found: u32, agent: String },
    /// The connection broke or carried nonsense.
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    /// The agent could not carry out the request.
    #[error("the agent refused: {0}")]
    Refused(String),
    /// The agent accepted the connection and never said hello.
    #[error(
        "the agent accepted the connection but did not answer hello within {} s (stopped, or \
         hung?)",
        HELLO_TIMEOUT.as_secs()
    )]
    Silent,
}

impl From<std::io::Error> for LinkError {
    fn from(err: std::io::Error) -> Self {
        Self::Protocol(ProtocolError::Io(err))
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunEnd {
    pub code: i32,
    pub timed_out: bool,
}

/// An open, greeted connection.
pub struct Link {
    stream: UnixStream,
    /// The agent's PID in its environment.
    pub agent_pid: u32,
}

async fn send(
    stream: &mut (impl AsyncWriteExt + Unpin),
    kind: FrameKind,
    payload: &[u8],
) -> Result<(), LinkError> {
    let mut frame = Vec::with_capacity(payload.len() + 5);
    protocol::write_frame(&mut frame, kind, payload)?;
    stream.write_all(&frame).await?;
    Ok(())
}

async fn send_message(stream: &mut UnixStream, message: &Request) -> Result<(), LinkError> {
    let json = serde_json::to_vec(message).map_err(ProtocolError::Json)?;
    send(stream, FrameKind::Message, &json).await
}

/// Reads one frame; `None` when the agent hung up between frames.
async fn read_frame(
    stream: &mut (impl AsyncReadExt + Unpin),
) -> Result<Option<(FrameKind, Vec<u8>)>, LinkError> {
    let mut header = [0u8; 5];
    match stream.read_exact(&mut header).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let (kind, len) = protocol::parse_header(header)?;
    let mut payload = vec![0u8; len];
    stream.read_exact(&mut payload).await?;
    Ok(Some((kind, payload)))
}

async fn read_reply(stream: &mut UnixStream, expected: &'static str) -> Result<Reply, LinkError> {
    match read_frame(stream).await? {
        Some((FrameKind::Message, payload)) => {
            Ok(serde_json::from_slice(&payload).map_err(ProtocolError::Json)?)
        }
        Some((kind, _)) => Err(ProtocolError::Unexpected {
            expected,
            got: format!("a {kind:?} frame"),
        }
        .into()),
        None => Err(ProtocolError::Unexpected {
            expected,
            got: "the end of the connection".into(),
        }
        .into()),
    }
}

impl Link {
    /// Connects and says hello. A version other than ours is [`LinkError::Version`], with the
    /// connection left open for [`Link::shutdown`].
    pub async fn open(socket: &Path) -> Result<(Self, Result<(), LinkError>), LinkError> {
        let mut stream = UnixStream::connect(socket)
            .await
            .map_err(LinkError::NotListening)?;
        let greeting = async {
            send_message(
                &mut stream,
                &Request::Hello {
                    version: PROTOCOL_VERSION,
                },
            )
            .await?;
            read_reply(&mut stream, "hello").await
        };
        let reply = tokio::time::timeout(HELLO_TIMEOUT, greeting)
            .await
            .map_err(|_| LinkError::Silent)??;
        let Reply::Hello {
            version,
            agent,
            pid,
        } = reply
        else {
            return Err(ProtocolError::Unexpected {
                expected: "hello",
                got: format!("{reply:?}"),
            }
            .into());
        };
        let fits = if version == PROTOCOL_VERSION {
            Ok(())
        } else {
            Err(LinkError::Version {
                found: version,
                agent,
            })
        };
        Ok((
            Self {
                stream,
                agent_pid: pid,
            },
            fits,
        ))
    }

    /// Tells the agent to exit (understood by every protocol version).
    pub async fn shutdown(mut self) -> Result<(), LinkError> {
        send_message(&mut self.stream, &Request::Shutdown).await?;
        let _ = read_reply(&mut self.stream, "bye").await;
        Ok(())
    }

    /// One file operation, answered by the agent itself: the answer, or the file error a tool
    /// reports (the outer error is the connection's).
    pub async fn files(
        mut self,
        request: FilesRequest,
    ) -> Result<Result<serde_json::Value, paddock_files::FileError>, LinkError> {
        send_message(&mut self.stream, &Request::Files(request)).await?;
        match read_reply(&mut self.stream, "a file answer").await? {
            Reply::Files { answer } => Ok(Ok(
                serde_json::from_str(&answer).map_err(ProtocolError::Json)?
            )),
            Reply::FileFailed { error } => Ok(Err(error)),
            Reply::Error { message } => Err(LinkError::Refused(message)),
            other => Err(ProtocolError::Unexpected {
                expected: "a file answer",
                got: format!("{other:?}"),
            }
            .into()),
        }
    }

    /// One action on the session's CPython contexts: an execution's stdout and stderr go to
    /// `chunks` as they come; the answer, or the context error a tool reports.
    pub async fn context(
        mut self,
        request: paddock_agent::protocol::ContextRequest,
        chunks: Option<&crate::ChunkSender>,
    ) -> Result<crate::ContextAnswer, LinkError> {
        use crate::stream::{OutputChunk, OutputStream};
        send_message(&mut self.stream, &Request::Context(request)).await?;
        let forward = |stream: OutputStream, bytes: Vec<u8>| {
            if let Some(chunks) = chunks.filter(|_| !bytes.is_empty()) {
                let _ = chunks.send(OutputChunk { stream, bytes });
            }
        };
        loop {
            match read_frame(&mut self.stream).await? {
                Some((FrameKind::Output, bytes)) => forward(OutputStream::Stdout, bytes),
                Some((FrameKind::Stderr, bytes)) => forward(OutputStream::Stderr, bytes),
                Some((FrameKind::Message, payload)) => {
                    let reply: Reply =
                        serde_json::from_slice(&payload).map_err(ProtocolError::Json)?;
                    return match reply {
                        Reply::Context { answer, failed } => {
                            let value: serde_json::Value =
                                serde_json::from_str(&answer).map_err(ProtocolError::Json)?;
                            if failed {
                                Ok(Err(
                                    serde_json::from_value(value).map_err(ProtocolError::Json)?
                                ))
                            } else {
                                Ok(Ok(value))
                            }
                        }
                        Reply::Error { message } => Err(LinkError::Refused(message)),
                        other => Err(ProtocolError::Unexpected {
                            expected: "a context answer",
                            got: format!("{other:?}"),
                        }
                        .into()),
                    };
                }
                Some((FrameKind::Stdin, _)) | None => {
                    return Err(ProtocolError::Unexpected {
                        expected: "a context answer",
                        got: "the end of the connection or a stdin frame (the agent died?)".into(),
                    }
                    .into());
                }
            }
        }
    }

    /// Runs `request` (with `stdin` when given; `request.stdin` is set from it); its output
    /// goes into `sink`, stderr apart when the sink has a listener and the run has pipes. Dropping the future closes the connection, which makes the agent end
    /// the run's tree.
    pub async fn run(
        mut self,
        request: RunRequest,
        stdin: Option<Vec<u8>>,
        sink: &OutputSink,
    ) -> Result<RunEnd, LinkError> {
        self.run_on(request, stdin, sink).await.map(|(end, _)| end)
    }

    /// [`Link::run`], asking the agent to keep the connection open afterwards: the link comes
    /// back when it did, ready for the next request without a new connection and hello.
    pub async fn run_keeping(
        mut self,
        mut request: RunRequest,
        stdin: Option<Vec<u8>>,
        sink: &OutputSink,
    ) -> Result<(RunEnd, Option<Link>), LinkError> {
        request.keep_connection = true;
        let (end, kept) = self.run_on(request, stdin, sink).await?;
        Ok((end, kept.then_some(self)))
    }

    /// Whether a kept link may carry another request: nothing waits to be read on it and the
    /// agent has not hung up (an agent that exited or was killed closed it). Asked of the
    /// kernel (`poll` with no wait), not of the runtime's cached readiness, which learns of a
    /// hang-up only on its next turn.
    pub fn reusable(&self) -> bool {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        use std::os::fd::AsFd;
        // A hang-up reads as the end (POLLIN), and POLLHUP and POLLERR come unasked.
        let mut fds = [PollFd::new(self.stream.as_fd(), PollFlags::POLLIN)];
        matches!(poll(&mut fds, PollTimeout::ZERO), Ok(0))
    }

    /// One run on this connection: how it ended, and whether the agent kept the connection.
    async fn run_on(
        &mut self,
        mut request: RunRequest,
        stdin: Option<Vec<u8>>,
        sink: &OutputSink,
    ) -> Result<(RunEnd, bool), LinkError> {
        request.stdin = stdin.is_some();
        if sink.splits() && !request.pty {
            request.split_stderr = true;
        }
        let request = Request::Run(request);
        send_message(&mut self.stream, &request).await?;
        let (mut from_agent, mut to_agent) = self.stream.split();
        // The input is fed while the output is read: a program that writes before it reads
        // (or never reads) would otherwise fill the socket both ways, and one that ends early
        // closes the run, whose answer is then the result, not the input's broken pipe.
        let feed = async {
            if let Some(data) = stdin {
                for chunk in data.chunks(STDIN_CHUNK) {
                    send(&mut to_agent, FrameKind::Stdin, chunk).await?;
                }
                send(&mut to_agent, FrameKind::Stdin, &[]).await?;
            }
            Ok::<(), LinkError>(())
        };
        let answer = read_run(&mut from_agent, sink);
        tokio::pin!(answer);
        tokio::select! {
            // The run ended: input not yet taken is moot.
            answered = &mut answer => return answered,
            // All fed (or the agent stopped taking it): the answer decides.
            _fed = feed => {}
        }
        answer.await
    }
}

/// The frames of one run until its answer: output into `sink`, then the exit (or the refusal),
/// and whether the agent kept the connection.
async fn read_run(
    stream: &mut (impl AsyncReadExt + Unpin),
    sink: &OutputSink,
) -> Result<(RunEnd, bool), LinkError> {
    loop {
        match read_frame(stream).await? {
            Some((FrameKind::Output, bytes)) => sink.push(&bytes),
            Some((FrameKind::Stderr, bytes)) => {
                sink.push_from(crate::stream::OutputStream::Stderr, &bytes);
            }
            Some((FrameKind::Message, payload)) => {
                let reply: Reply = serde_json::from_slice(&payload).map_err(ProtocolError::Json)?;
                return match reply {
                    Reply::Exit {
                        code,
                        timed_out,
                        kept,
                    } => Ok((RunEnd { code, timed_out }, kept)),
                    Reply::Error { message } => Err(LinkError::Refused(message)),
                    other => Err(ProtocolError::Unexpected {
                        expected: "exit",
                        got: format!("{other:?}"),
                    }
                    .into()),
                };
            }
            Some((FrameKind::Stdin, _)) => {
                return Err(ProtocolError::Unexpected {
                    expected: "output or exit",
                    got: "a stdin frame".into(),
                }
                .into());
            }
            None => {
                return Err(ProtocolError::Unexpected {
                    expected: "exit",
                    got: "the end of the connection (the agent died?)".into(),
                }
                .into());
            }
        }
    }
}
