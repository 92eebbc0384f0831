//! BIRD's control socket, spoken directly (what `birdc` does): one connection per command,
//! BIRD's welcome line, the command, then reply lines `CODE-text` (more follow), ` text` (same
//! code, continued) and `CODE text` (the last), codes 8xxx/9xxx being errors. Talking to the
//! socket rather than executing `birdc` costs no process per command (the status is polled
//! every few seconds), needs no `birdc` installed, and gives the reply codes instead of
//! birdc's screen text.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::error::BgpError;

/// Bound on one command (a reconfiguration or a listing of every session).
const TIMEOUT: Duration = Duration::from_secs(20);
/// Bound on the liveness probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Reply codes this backend acts on.
pub const CODE_WELCOME: u16 = 1;
pub const CODE_READING_CONFIG: u16 = 2;
pub const CODE_RECONFIGURED: u16 = 3;
pub const CODE_RECONFIG_IN_PROGRESS: u16 = 4;
pub const CODE_RECONFIG_QUEUED: u16 = 5;
pub const CODE_SHUTDOWN: u16 = 7;
pub const CODE_GRACEFUL_RESTART: u16 = 25;

/// One line of a reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub code: u16,
    pub text: String,
}

/// The control socket at one path.
#[derive(Debug, Clone)]
pub struct Control {
    socket: PathBuf,
}

impl Control {
    pub fn new(socket: &Path) -> Control {
        Control {
            socket: socket.to_path_buf(),
        }
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Whether a BIRD answers on the socket (its welcome line arrives).
    pub fn answers(&self) -> bool {
        self.connect(PROBE_TIMEOUT)
            .and_then(|stream| {
                let mut reader = BufReader::new(stream);
                read_reply(&mut reader).map_err(std::io::Error::other)
            })
            .is_ok_and(|welcome| welcome.last().is_some_and(|l| l.code == CODE_WELCOME))
    }

    /// Runs `command`; the reply's lines, or the error BIRD answered with.
    pub fn run(&self, command: &str) -> Result<Vec<Line>, BgpError> {
        let failed = |detail: String| BgpError::Control {
            socket: self.socket.clone(),
            command: command.to_string(),
            detail,
        };
        let stream = self.connect(TIMEOUT).map_err(|e| failed(e.to_string()))?;
        let mut writer = stream.try_clone().map_err(|e| failed(e.to_string()))?;
        let mut reader = BufReader::new(stream);
        read_reply(&mut reader).map_err(|e| failed(format!("welcome: {e}")))?;
        writer
            .write_all(format!("{command}\n").as_bytes())
            .map_err(|e| failed(e.to_string()))?;
        let reply = read_reply(&mut reader).map_err(failed)?;
        match reply.last() {
            Some(last) if last.code >= 8000 => Err(BgpError::Refused {
                command: command.to_string(),
                code: last.code,
                text: last.text.clone(),
            }),
            _ => Ok(reply),
        }
    }

    fn connect(&self, timeout: Duration) -> std::io::Result<UnixStream> {
        let stream = UnixStream::connect(&self.socket)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        Ok(stream)
    }
}

/// Reads one reply: lines up to and including the one whose code is followed by a space.
/// Spontaneous lines (`+...`) are skipped.
pub fn read_reply(reader: &mut impl BufRead) -> Result<Vec<Line>, String> {
    let mut lines = Vec::new();
    let mut buf = String::new();
    loop {
        buf.clear();
        let n = reader.read_line(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("BIRD closed the connection before the end of its reply".into());
        }
        let line = buf.trim_end_matches(['\n', '\r']);
        if line.starts_with('+') {
            continue;
        }
        if let Some(text) = line.strip_prefix(' ') {
            let code = lines.last().map_or(0, |l: &Line| l.code);
            lines.push(Line {
                code,
                text: text.to_string(),
            });
            continue;
        }
        let (code, sep, text) =
            split_code(line).ok_or_else(|| format!("unexpected line {line:?}"))?;
        lines.push(Line {
            code,
            text: text.to_string(),
        });
        if sep == ' ' {
            return Ok(lines);
        }
    }
}

/// `0002-Reading ...` -> (2, '-', "Reading ...").
fn split_code(line: &str) -> Option<(u16, char, &str)> {
    let digits = line.get(..4)?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let sep = line[4..].chars().next().unwrap_or(' ');
    if sep != ' ' && sep != '-' {
        return None;
    }
    Some((digits.parse().ok()?, sep, line.get(5..).unwrap_or("")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn reply(text: &str) -> Result<Vec<Line>, String> {
        read_reply(&mut Cursor::new(text.as_bytes()))
    }

    #[test]
    fn lines_and_continuations() {
        let r = reply(
            "2002-Name       Proto\n1002-device1    Device\n direct1    Direct\n+0009 spontaneous\n0000 \nnext",
        )
        .unwrap();
        assert_eq!(
            r,
            vec![
                Line {
                    code: 2002,
                    text: "Name       Proto".into()
                },
                Line {
                    code: 1002,
                    text: "device1    Device".into()
                },
                Line {
                    code: 1002,
                    text: "direct1    Direct".into()
                },
                Line {
                    code: 0,
                    text: "".into()
                },
            ]
        );
        let r = reply("0002-Reading configuration from /x/bird.conf\n0003 Reconfigured\n").unwrap();
        assert_eq!(r.last().unwrap().code, CODE_RECONFIGURED);
        assert_eq!(
            reply("0001 BIRD 2.0.12 ready.\n").unwrap()[0].code,
            CODE_WELCOME
        );
        assert_eq!(reply("9001 syntax error\n").unwrap()[0].code, 9001);
        // The final line of a reply without a trailing newline (BIRD always sends one).
        assert_eq!(reply("0014 Total: 3").unwrap()[0].text, "Total: 3");
    }

    #[test]
    fn broken_replies() {
        assert!(reply("1002-partial\n")
            .unwrap_err()
            .contains("closed the connection"));
        assert!(reply("garbage\n").unwrap_err().contains("unexpected line"));
        assert!(reply("12\n").unwrap_err().contains("unexpected line"));
        assert!(reply("0001xBIRD\n")
            .unwrap_err()
            .contains("unexpected line"));
    }

    #[test]
    fn talks_to_a_socket() {
        use std::os::unix::net::UnixListener;
        let dir = std::env::temp_dir().join(format!("bgp-control-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bird.ctl");
        let listener = UnixListener::bind(&path).unwrap();
        // A stand-in that answers as BIRD's CLI does, two connections.
        let server = std::thread::spawn(move || {
            for answer in ["0003 Reconfigured\n", "8002 bird.conf:1:1 syntax error\n"] {
                let (mut s, _) = listener.accept().unwrap();
                s.write_all(b"0001 BIRD 2.0.12 ready.\n").unwrap();
                let mut cmd = String::new();
                BufReader::new(s.try_clone().unwrap())
                    .read_line(&mut cmd)
                    .unwrap();
                assert_eq!(cmd, "configure\n");
                s.write_all(b"0002-Reading configuration\n").unwrap();
                s.write_all(answer.as_bytes()).unwrap();
            }
        });
        let c = Control::new(&path);
        assert_eq!(
            c.run("configure").unwrap().last().unwrap().code,
            CODE_RECONFIGURED
        );
        let e = c.run("configure").unwrap_err().to_string();
        assert_eq!(
            e,
            "BIRD refused `configure`: 8002 bird.conf:1:1 syntax error"
        );
        server.join().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let e = c.run("show status").unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "BIRD control socket {}: `show status`: ",
                path.display()
            )),
            "{e}"
        );
        assert!(!c.answers());
    }
}
