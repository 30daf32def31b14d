//! The vendored wasmtime's epoch probes (`vendor/README.md`, fix 3): compiled code checks
//! for the end of an epoch by loading from its store's epoch page, which the engine makes
//! inaccessible at each tick; the fault is turned into the `new_epoch` call and execution
//! resumes at the probe. These tests drive wasmtime directly with small modules, so that
//! each one attacks one part of that path: loops and call trees without any other check
//! (a probe merged away by alias analysis would leave a loop unstoppable),
//! registers across a resumed probe, deadlines further than one tick, a fiber dropped
//! while it yields from a probe, and traps that are not probes.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use wasm_encoder::{
    BlockType, CodeSection, ExportKind, ExportSection, Function, FunctionSection, Instruction as I,
    MemorySection, MemoryType, Module, TypeSection, ValType,
};
use wasmtime::{Config, Engine, Instance, Store, Trap, UpdateDeadline};

fn engine() -> Engine {
    let mut config = Config::new();
    config.epoch_interruption(true);
    Engine::new(&config).expect("engine")
}

/// A module of one function `f` (`params` -> `results`, with `locals`), and one page of
/// memory when `memory`.
fn module(
    engine: &Engine,
    params: &[ValType],
    results: &[ValType],
    locals: &[(u32, ValType)],
    body: &[I<'_>],
    memory: bool,
) -> wasmtime::Module {
    let mut types = TypeSection::new();
    types
        .ty()
        .function(params.iter().copied(), results.iter().copied());
    let mut functions = FunctionSection::new();
    functions.function(0);
    let mut memories = MemorySection::new();
    memories.memory(MemoryType {
        minimum: 1,
        maximum: None,
        memory64: false,
        shared: false,
        page_size_log2: None,
    });
    let mut exports = ExportSection::new();
    exports.export("f", ExportKind::Func, 0);
    let mut code = CodeSection::new();
    let mut f = Function::new(locals.iter().copied());
    for instruction in body {
        f.instruction(instruction);
    }
    f.instruction(&I::End);
    code.function(&f);
    let mut module = Module::new();
    module.section(&types).section(&functions);
    if memory {
        module.section(&memories);
    }
    module.section(&exports).section(&code);
    wasmtime::Module::new(engine, module.finish()).expect("the module compiles")
}

/// `f()`: a loop with no call in it, forever.
fn spin(engine: &Engine) -> wasmtime::Module {
    let body = [I::Loop(BlockType::Empty), I::Br(0), I::End];
    module(engine, &[], &[], &[], &body, false)
}

/// `f(depth)`: calls itself twice with `depth - 1` until 0: a tree of 2^depth calls with
/// no loop anywhere, so only the probes at function entries can stop it.
fn call_tree(engine: &Engine) -> wasmtime::Module {
    let mut body = vec![I::LocalGet(0), I::If(BlockType::Empty)];
    for _ in 0..2 {
        body.extend([I::LocalGet(0), I::I32Const(1), I::I32Sub, I::Call(0)]);
    }
    body.push(I::End);
    module(engine, &[ValType::I32], &[], &[], &body, false)
}

/// `f(n)`: `n` rounds over eight i64 and eight f64 locals, all live across the loop's
/// back edge (so in registers at its probe), folded into one i64.
fn checksum(engine: &Engine) -> wasmtime::Module {
    const INTS: u32 = 1; // locals 1..=8: i64; 9..=16: f64 (local 0 is n)
    const FLOATS: u32 = 9;
    let mut body = Vec::new();
    for k in 0..8u32 {
        body.extend([I::I64Const(i64::from(k) + 1), I::LocalSet(INTS + k)]);
        body.extend([
            I::F64Const((f64::from(k) + 0.5).into()),
            I::LocalSet(FLOATS + k),
        ]);
    }
    body.extend([
        I::Block(BlockType::Empty),
        I::Loop(BlockType::Empty),
        I::LocalGet(0),
        I::I64Eqz,
        I::BrIf(1),
        I::LocalGet(0),
        I::I64Const(1),
        I::I64Sub,
        I::LocalSet(0),
    ]);
    for k in 0..8u32 {
        body.extend([
            I::LocalGet(INTS + k),
            I::I64Const(6_364_136_223_846_793_005),
            I::I64Mul,
            I::LocalGet(INTS + (k + 1) % 8),
            I::I64Add,
            I::LocalSet(INTS + k),
            I::LocalGet(FLOATS + k),
            I::F64Const(0.999.into()),
            I::F64Mul,
            I::LocalGet(INTS + k),
            I::I64Const(0xffff),
            I::I64And,
            I::F64ConvertI64U,
            I::F64Add,
            I::LocalSet(FLOATS + k),
        ]);
    }
    body.extend([I::Br(0), I::End, I::End, I::I64Const(0)]);
    for k in 0..8u32 {
        body.extend([
            I::LocalGet(INTS + k),
            I::I64Xor,
            I::LocalGet(FLOATS + k),
            I::I64ReinterpretF64,
            I::I64Xor,
        ]);
    }
    let locals = [(8, ValType::I64), (8, ValType::F64)];
    module(
        engine,
        &[ValType::I64],
        &[ValType::I64],
        &locals,
        &body,
        false,
    )
}

/// Ends an epoch every `every` until dropped; counts the ticks.
struct Ticker {
    stop: Arc<AtomicBool>,
    ticks: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Ticker {
    fn start(engine: &Engine, every: Duration) -> Ticker {
        let stop = Arc::new(AtomicBool::new(false));
        let ticks = Arc::new(AtomicU64::new(0));
        let (engine, stopped, counted) = (engine.clone(), stop.clone(), ticks.clone());
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                std::thread::sleep(every);
                // Counted first: a count read at any moment is never below the epoch.
                counted.fetch_add(1, Ordering::Relaxed);
                engine.increment_epoch();
            }
        });
        Ticker {
            stop,
            ticks,
            thread: Some(thread),
        }
    }

    fn ticks(&self) -> u64 {
        self.ticks.load(Ordering::Relaxed)
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Run `call` on its own thread; fail (instead of hanging the suite) if it is still
/// running after 60 s, which is what an unstoppable guest would do.
fn within_a_minute<R: Send + 'static>(call: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(call());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the guest was not stopped: an epoch probe did not fire")
}

fn trap_of(error: &wasmtime::Error) -> Option<Trap> {
    error.downcast_ref::<Trap>().copied()
}

/// A store of `module`'s engine whose deadline is the next tick, with what happens then
/// set by `at_deadline`, and `module`'s instance in it.
fn instantiate(
    module: &wasmtime::Module,
    at_deadline: impl FnOnce(&mut Store<()>),
) -> (Store<()>, Instance) {
    let mut store = Store::new(module.engine(), ());
    store.set_epoch_deadline(1);
    at_deadline(&mut store);
    let instance = Instance::new(&mut store, module, &[]).expect("instantiate");
    (store, instance)
}

/// Call `f(arg)` of `module`, which never returns by itself, with epochs ending every
/// 5 ms and a deadline that traps: the trap it ends with.
fn stopped<P>(module: wasmtime::Module, arg: P) -> Option<Trap>
where
    P: wasmtime::WasmParams + Send + 'static,
{
    let _ticker = Ticker::start(module.engine(), Duration::from_millis(5));
    let error = within_a_minute(move || {
        let (mut store, instance) = instantiate(&module, |store| store.epoch_deadline_trap());
        let f = instance
            .get_typed_func::<P, ()>(&mut store, "f")
            .expect("f");
        f.call(&mut store, arg).expect_err("it never returns")
    });
    trap_of(&error)
}

#[test]
fn time_limit_a_loop_without_calls_stops_when_its_epoch_ends() {
    let engine = engine();
    assert_eq!(stopped(spin(&engine), ()), Some(Trap::Interrupt));
}

#[test]
fn time_limit_a_call_tree_without_loops_stops_at_a_function_entry() {
    // 2^60 calls.
    let engine = engine();
    assert_eq!(stopped(call_tree(&engine), 60i32), Some(Trap::Interrupt));
}

#[test]
fn registers_survive_execution_resumed_at_a_probe() {
    let engine = engine();
    let module = checksum(&engine);
    let rounds: i64 = 20_000_000;
    let run = |module: &wasmtime::Module, resumed: Arc<AtomicU64>| {
        let (mut store, instance) = instantiate(module, |store| {
            store.epoch_deadline_callback(move |_| {
                resumed.fetch_add(1, Ordering::Relaxed);
                Ok(UpdateDeadline::Continue(1))
            })
        });
        let f = instance
            .get_typed_func::<i64, i64>(&mut store, "f")
            .expect("f");
        f.call(&mut store, rounds).expect("the loop ends")
    };
    let quiet = run(&module, Arc::new(AtomicU64::new(0)));
    let resumed = Arc::new(AtomicU64::new(0));
    let ticked = {
        let _ticker = Ticker::start(&engine, Duration::from_micros(200));
        run(&module, resumed.clone())
    };
    assert!(
        resumed.load(Ordering::Relaxed) >= 5,
        "the loop was resumed at its probe only {} times",
        resumed.load(Ordering::Relaxed)
    );
    assert_eq!(
        quiet, ticked,
        "the same loop computed another value when its probe faulted"
    );
}

#[test]
fn time_limit_a_deadline_several_ticks_away_is_kept() {
    let engine = engine();
    let module = spin(&engine);
    let ticker = Ticker::start(&engine, Duration::from_millis(2));
    let callbacks = Arc::new(AtomicU64::new(0));
    let counted = callbacks.clone();
    let error = within_a_minute(move || {
        let (mut store, instance) = instantiate(&module, |store| {
            store.set_epoch_deadline(5);
            store.epoch_deadline_callback(move |_| {
                if counted.fetch_add(1, Ordering::Relaxed) == 2 {
                    return Err(wasmtime::Error::msg("third deadline"));
                }
                Ok(UpdateDeadline::Continue(5))
            })
        });
        let f = instance
            .get_typed_func::<(), ()>(&mut store, "f")
            .expect("f");
        f.call(&mut store, ())
            .expect_err("the third deadline stops it")
    });
    assert!(format!("{error:?}").contains("third deadline"), "{error:?}");
    assert_eq!(callbacks.load(Ordering::Relaxed), 3);
    // Three deadlines of five ticks each: the behaviour ran at deadlines, not at ticks.
    assert!(ticker.ticks() >= 15, "only {} ticks passed", ticker.ticks());
}

/// A store that yields to the async executor at every tick, as sandpy's do.
fn yielding_store(engine: &Engine) -> Store<()> {
    let mut store = Store::new(engine, ());
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(|_| Ok(UpdateDeadline::Yield(1)));
    store
}

#[test]
fn time_limit_a_fiber_dropped_while_it_yields_from_a_probe_leaves_the_engine_sound() {
    let engine = engine();
    let spin = spin(&engine);
    let checksum = checksum(&engine);
    let _ticker = Ticker::start(&engine, Duration::from_millis(1));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio");
    for _ in 0..20 {
        let mut store = yielding_store(&engine);
        let stopped = rt.block_on(async {
            let instance = Instance::new_async(&mut store, &spin, &[])
                .await
                .expect("instantiate");
            let f = instance
                .get_typed_func::<(), ()>(&mut store, "f")
                .expect("f");
            tokio::time::timeout(Duration::from_millis(10), f.call_async(&mut store, ())).await
        });
        assert!(stopped.is_err(), "an endless loop returned: {stopped:?}");
    }
    // The dropped stores' pages went back to the engine: a new store computes as before.
    let mut store = yielding_store(&engine);
    let value = rt.block_on(async {
        let instance = Instance::new_async(&mut store, &checksum, &[])
            .await
            .expect("instantiate");
        let f = instance
            .get_typed_func::<i64, i64>(&mut store, "f")
            .expect("f");
        f.call_async(&mut store, 1_000_000).await.expect("returns")
    });
    let (mut quiet, instance) =
        instantiate(&checksum, |store| store.set_epoch_deadline(u64::MAX / 2));
    let f = instance
        .get_typed_func::<i64, i64>(&mut quiet, "f")
        .expect("f");
    assert_eq!(value, f.call(&mut quiet, 1_000_000).expect("returns"));
}

#[test]
fn traps_that_are_not_probes_keep_their_own_code() {
    let engine = engine();
    let _ticker = Ticker::start(&engine, Duration::from_millis(1));
    let out_of_bounds = module(
        &engine,
        &[],
        &[],
        &[],
        &[
            I::I32Const(1 << 20),
            I::I32Load(wasm_encoder::MemArg {
                offset: 0,
                align: 2,
                memory_index: 0,
            }),
            I::Drop,
        ],
        true,
    );
    let unreachable = module(&engine, &[], &[], &[], &[I::Unreachable], false);
    for (module, expected) in [
        (out_of_bounds, Trap::MemoryOutOfBounds),
        (unreachable, Trap::UnreachableCodeReached),
    ] {
        let (mut store, instance) = instantiate(&module, |store| {
            store.epoch_deadline_callback(|_| Ok(UpdateDeadline::Continue(1)))
        });
        let f = instance
            .get_typed_func::<(), ()>(&mut store, "f")
            .expect("f");
        let error = f.call(&mut store, ()).expect_err("traps");
        assert_eq!(trap_of(&error), Some(expected), "{error:?}");
    }
}

/// Probes need the signal handler: an engine that would run them without it is refused
/// rather than left unable to end an epoch.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[test]
fn time_limit_epoch_probes_without_signal_handling_are_refused() {
    let mut config = Config::new();
    config.epoch_interruption(true).signals_based_traps(false);
    let error = Engine::new(&config).expect_err("refused");
    assert!(
        error.to_string().contains("needs signals-based traps"),
        "{error}"
    );
}
