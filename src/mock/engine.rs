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
    waiting: HashMap<u64, Sender<Event>>,
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

    fn now_us(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// Queues a request that arrived at `arrival`. Err: it can never fit.
    pub fn submit(
        &self,
        arrival: Instant,
        blocks: Vec<u64>,
        prompt_tokens: u64,
        output_tokens: u64,
    ) -> Result<Ticket, String> {
        let mut st = self.lock();
        if let Some(why) = st.engine.never_fits(prompt_tokens, output_tokens) {
            return Err(why);
        }
        let id = st.next_id;
        st.next_id += 1;
        let (tx, rx) = mpsc::channel();
        st.waiting.insert(id, tx);
        let arrival_us =
            u64::try_from(arrival.saturating_duration_since(self.start).as_micros()).unwrap_or(0);
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
            for (id, t) in tokens.drain(..) {
                if let Some(tx) = st.waiting.get(&id) {
                    let _ = tx.send(Event::Token(t));
                }
            }
            for f in fin.drain(..) {
                if let Some(tx) = st.waiting.remove(&f.id) {
                    let _ = tx.send(Event::Done {
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
