//! `mc-mock --engine`: the engine model behind the mock's HTTP, in real
//! time. One driver thread owns the engine; its clock is the wall clock
//! (µs since the server started). A step is computed when the wall clock
//! reaches its start and its tokens are released when the wall clock
//! reaches its end, so a request arriving mid-step joins the next step, and
//! queueing, batching and the prefix cache show end to end.

use std::collections::HashMap;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::engine::{Engine, EngineParams, EngineRequest, Finished};
use crate::mock::metrics::EngineHistograms;

/// What a request's connection thread hears from the engine.
enum Event {
    /// An output token, made by the step ending at this µs.
    Token(u64),
    /// The request is complete; its cached prompt tokens.
    Done { cached: u64 },
}

struct State {
    engine: Engine,
    next_id: u64,
    waiting: HashMap<u64, Waiter>,
    /// vLLM's per-request and per-step histograms, for `/metrics`.
    hist: EngineHistograms,
}

/// A request in the engine, as its connection thread and `/metrics` need it.
struct Waiter {
    tx: Sender<Event>,
    arrival_us: u64,
    prompt_tokens: u64,
    /// When its last token so far was made.
    last_token_us: Option<u64>,
}

/// The engine shared by the connection threads.
pub struct LiveEngine {
    state: Mutex<State>,
    wake: Condvar,
    start: Instant,
}

impl LiveEngine {
    /// Starts the driver thread; it lives as long as the server.
    pub fn start(params: EngineParams, start: Instant) -> std::io::Result<Arc<LiveEngine>> {
        let mut engine = Engine::new(params);
        engine.log_tokens();
        let live = Arc::new(LiveEngine {
            state: Mutex::new(State {
                engine,
                next_id: 0,
                waiting: HashMap::new(),
                hist: EngineHistograms::default(),
            }),
            wake: Condvar::new(),
            start,
        });
        let driver = live.clone();
        std::thread::Builder::new()
            .name("mc-mock-engine".into())
            .spawn(move || driver.drive())?;
        Ok(live)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The engine's gauges and counters now, for `/metrics`.
    pub fn load(&self) -> crate::engine::EngineLoad {
        self.lock().engine.load()
    }

    /// vLLM's histograms (queue, prefill, decode, inference, TTFT, ITL,
    /// tokens per step), appended to a `/metrics` exposition.
    pub fn render_histograms(&self, out: &mut String, model: &str, created: f64) {
        self.lock().hist.render(out, model, created);
    }

    fn now_us(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// Queues a request that arrived at `arrival`, asking for up to
    /// `max_tokens` and answered with `output_tokens`. Err: it can never
    /// fit (vLLM checks the context limit against what is asked for).
    pub fn submit(
        &self,
        arrival: Instant,
        blocks: Vec<u64>,
        prompt_tokens: u64,
        max_tokens: u64,
        output_tokens: u64,
    ) -> Result<Ticket, String> {
        let mut st = self.lock();
        let refused = st
            .engine
            .past_context(prompt_tokens, max_tokens.max(output_tokens))
            .or_else(|| st.engine.never_fits(prompt_tokens, output_tokens));
        if let Some(why) = refused {
            return Err(why);
        }
        let id = st.next_id;
        st.next_id += 1;
        let (tx, rx) = mpsc::channel();
        let arrival_us =
            u64::try_from(arrival.saturating_duration_since(self.start).as_micros()).unwrap_or(0);
        st.waiting.insert(
            id,
            Waiter {
                tx,
                arrival_us,
                prompt_tokens,
                last_token_us: None,
            },
        );
        st.engine.add(EngineRequest {
            id,
            arrival_us,
            blocks,
            prompt_tokens,
            output_tokens,
        });
        drop(st);
        self.wake.notify_one();
        Ok(Ticket {
            rx,
            start: self.start,
            tokens: 0,
            cached: None,
        })
    }

    /// The driver: runs every step whose start the wall clock has reached,
    /// hands out tokens and ends, then sleeps until the next step is due
    /// or a request arrives.
    fn drive(&self) {
        let mut fin: Vec<Finished> = Vec::new();
        let mut tokens: Vec<(u64, u64)> = Vec::new();
        let mut st = self.lock();
        loop {
            let now = self.now_us();
            while st.engine.now_us() < now {
                st.engine.advance(Some(now), &mut fin);
                if st.engine.in_flight() == 0 {
                    break;
                }
            }
            st.engine.drain_tokens(&mut tokens);
            let State { waiting, hist, .. } = &mut *st;
            // One step's tokens share its end time and come together.
            let mut step: Option<(u64, u64)> = None;
            for (id, t) in tokens.drain(..) {
                let Some(w) = waiting.get_mut(&id) else {
                    continue;
                };
                let mut counted = 1;
                match w.last_token_us {
                    None => {
                        hist.first_token(w.arrival_us, t);
                        counted += w.prompt_tokens;
                    }
                    Some(prev) => hist.next_token(t.saturating_sub(prev)),
                }
                w.last_token_us = Some(t);
                step = match step {
                    Some((end, n)) if end == t => Some((end, n + counted)),
                    Some((_, n)) => {
                        hist.iteration(n);
                        Some((t, counted))
                    }
                    None => Some((t, counted)),
                };
                let _ = w.tx.send(Event::Token(t));
            }
            if let Some((_, n)) = step {
                hist.iteration(n);
            }
            for f in fin.drain(..) {
                if let Some(w) = waiting.remove(&f.id) {
                    if f.rejected.is_none() {
                        hist.finished(f.arrival_us, f.first_scheduled_us, &f.token_us);
                    }
                    let _ = w.tx.send(Event::Done {
                        cached: f.cached_tokens,
                    });
                }
            }
            st = if st.engine.in_flight() > 0 {
                // The engine clock is where the next step starts.
                let next = st.engine.now_us().saturating_sub(self.now_us());
                let wait = Duration::from_micros(next.max(50));
                match self.wake.wait_timeout(st, wait) {
                    Ok((g, _)) => g,
                    Err(e) => e.into_inner().0,
                }
            } else {
                match self.wake.wait(st) {
                    Ok(g) => g,
                    Err(e) => e.into_inner(),
                }
            };
        }
    }
}

/// One request's view of the engine.
pub struct Ticket {
    rx: Receiver<Event>,
    start: Instant,
    tokens: u64,
    cached: Option<u64>,
}

impl Ticket {
    /// Blocks until output token `i` (0-based) is out, or until the request
    /// is complete (a 0-token answer).
    pub fn wait_token(&mut self, i: u64) {
        while self.tokens <= i && self.cached.is_none() {
            match self.rx.recv() {
                Ok(Event::Token(t)) => {
                    self.tokens += 1;
                    crate::mock::latency::sleep_until(self.start + Duration::from_micros(t));
                }
                Ok(Event::Done { cached }) => self.cached = Some(cached),
                // The driver never drops a sender before Done; be safe.
                Err(_) => self.cached = Some(0),
            }
        }
    }

    /// Prompt tokens served from the prefix cache (waits for the end).
    pub fn cached(&mut self) -> u64 {
        while self.cached.is_none() {
            match self.rx.recv() {
                Ok(Event::Token(_)) => self.tokens += 1,
                Ok(Event::Done { cached }) => self.cached = Some(cached),
                Err(_) => self.cached = Some(0),
            }
        }
        self.cached.unwrap_or(0)
    }
}
