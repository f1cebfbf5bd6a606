//! The Python agents write, compared with CPython: each expected value below is what CPython
//! 3.11 gives for the same code, except where a comment says why Paddock must differ.

use paddock_tests::run_script;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

fn run(code: &str) -> Value {
    run_script(code, &["--timeout", "20"]).json()
}

fn result_of(code: &str) -> Value {
    let v = run(code);
    assert_eq!(v["ok"], json!(true), "{v}");
    v["result"].clone()
}

#[test]
fn warnings_import_and_warn_prints_to_the_scripts_output() {
    let v = run("import warnings\n\
         warnings.warn('careful')\n\
         warnings.warn('old', DeprecationWarning)\n\
         with warnings.catch_warnings(record=True) as caught:\n    \
             warnings.simplefilter('always')\n    \
             warnings.warn('x', UserWarning)\n\
         [str(caught[0].message), caught[0].category.__name__]");
    assert_eq!(v["ok"], json!(true), "{v}");
    assert_eq!(v["result"], json!(["x", "UserWarning"]));
    // CPython writes `FILE:LINE: Category: message` to stderr (DeprecationWarning too, when
    // raised in __main__), then the source line when it can read the file; a script has no file.
    assert_eq!(
        v["output"],
        json!("<script>:2: UserWarning: careful\n<script>:3: DeprecationWarning: old\n")
    );
}

#[test]
fn thread_locks_work_but_no_thread_starts() {
    let r = result_of(
        "import _thread, datetime\n\
         lock = _thread.allocate_lock()\n\
         with lock:\n    held = lock.locked()\n\
         rlock = _thread.RLock()\n\
         with rlock:\n    with rlock:\n        pass\n\
         try:\n    _thread.start_new_thread(print, ('x',))\n    started = 'started'\n\
         except RuntimeError as e:\n    started = str(e)\n\
         import threading\n\
         try:\n    threading.Thread(target=print, args=('x',)).start()\n    thread = 'started'\n\
         except RuntimeError as e:\n    thread = str(e)\n\
         [held, lock.locked(), isinstance(_thread.get_ident(), int), started, thread,\n \
         threading.current_thread().name,\n \
         str(datetime.datetime.strptime('2024-06-15 10:30', '%Y-%m-%d %H:%M'))]",
    );
    assert_eq!(
        r,
        json!([
            true,
            false,
            true,
            "threads are not available: scripts in the Paddock sandbox run on one thread; \
             use asyncio (e.g. asyncio.gather) to run tool calls concurrently",
            "threads are not available: scripts in the Paddock sandbox run on one thread; \
             use asyncio (e.g. asyncio.gather) to run tool calls concurrently",
            "MainThread",
            "2024-06-15 10:30:00"
        ])
    );
}

#[test]
fn re_functions_take_count_and_flags_positionally() {
    let r = result_of(
        "import re\n\
         [re.sub('a', 'b', 'aaa', 1), re.subn('a', 'b', 'aaa', 1), re.split(',', 'a,b,c', 1),\n \
         re.sub('a', 'b', 'aAa', 0, re.I), re.sub('a', 'b', 'aaa', count=2)]",
    );
    assert_eq!(r, json!(["baa", ["baa", 1], ["a", "b,c"], "bbb", "bba"]));
}

#[test]
fn pure_paths_work_and_the_file_system_is_refused() {
    let r = result_of(
        "import pathlib\n\
         p = pathlib.Path('/data/reports/q3.tar.gz')\n\
         [p.name, p.stem, p.suffix, p.suffixes, str(p.parent), p.parts, str(p.joinpath('x', 'y')),\n \
         str(p.with_suffix('.zip')), str(p.with_name('a.txt')), str(p.relative_to('/data')),\n \
         p.match('*.gz'), p.is_absolute(), str(pathlib.PurePosixPath('a') / 'b' / '..' / 'c'),\n \
         str(pathlib.PureWindowsPath('C:/x/y.txt').parent), pathlib.PureWindowsPath('C:/x').drive,\n \
         repr(pathlib.PurePath('a/b')), p.is_relative_to('/data'), type(p).__name__,\n \
         str(p.parents[1])]",
    );
    assert_eq!(
        r,
        json!([
            "q3.tar.gz",
            "q3.tar",
            ".gz",
            [".tar", ".gz"],
            "/data/reports",
            ["/", "data", "reports", "q3.tar.gz"],
            "/data/reports/q3.tar.gz/x/y",
            "/data/reports/q3.tar.zip",
            "/data/reports/a.txt",
            "reports/q3.tar.gz",
            true,
            true,
            "a/b/../c",
            "C:\\x",
            "C:",
            "PurePosixPath('a/b')",
            true,
            "PosixPath",
            "/data"
        ])
    );

    // Where CPython would touch the disk, a script gets a PermissionError naming the method.
    let r = result_of(
        "import pathlib\n\
         p = pathlib.Path('/etc/passwd')\n\
         calls = {'exists': p.exists, 'read_text': p.read_text, 'iterdir': lambda: list(p.iterdir()),\n \
         'cwd': pathlib.Path.cwd, 'home': pathlib.Path.home, 'resolve': p.resolve, 'open': p.open,\n \
         'stat': p.stat, 'is_file': p.is_file, 'glob': lambda: list(p.glob('*')),\n \
         'write_text': lambda: p.write_text('x'), 'absolute': p.absolute,\n \
         'expanduser': pathlib.Path('~').expanduser, 'mkdir': p.mkdir, 'unlink': p.unlink}\n\
         out = {}\n\
         for name, call in calls.items():\n    \
             try:\n        call()\n        out[name] = 'NOT REFUSED'\n    \
             except PermissionError as e:\n        out[name] = str(e)\n\
         out",
    );
    for (name, message) in r.as_object().unwrap() {
        assert_eq!(
            message,
            &json!(format!(
                "Path.{name}() is not available: scripts in the Paddock sandbox have no file \
                 system; call a tool instead"
            )),
        );
    }
    assert_eq!(r.as_object().unwrap().len(), 15);
}

#[test]
fn standard_streams_are_text_streams() {
    let v = run("import io, sys\n\
         print('to stderr', file=sys.stderr)\n\
         sys.stdout.write('written\\n')\n\
         sys.stdout = io.StringIO()\nprint('hidden')\nsys.stdout = sys.__stdout__\nprint('restored')\n\
         try:\n    input('name? ')\n    read = 'read'\nexcept EOFError as e:\n    read = str(e)\n\
         [str(type(sys.stdout)), isinstance(sys.stdout, io.TextIOBase),\n \
         isinstance(sys.stderr, io.TextIOBase), sys.stdout.writable(), sys.stdout.encoding,\n \
         read, sys.stdin.read(), repr(sys.__stderr__)]");
    assert_eq!(v["ok"], json!(true), "{v}");
    assert_eq!(v["output"], json!("to stderr\nwritten\nrestored\nname? "));
    assert_eq!(
        v["result"],
        json!([
            "<class '_io.TextIOWrapper'>",
            true,
            true,
            true,
            "utf-8",
            "EOF when reading a line",
            "",
            "<_io.TextIOWrapper name='<stderr>' mode='w' encoding='utf-8'>"
        ])
    );
}

#[test]
fn a_cyclic_result_comes_back_as_its_repr() {
    // CPython's json refuses it ("Circular reference detected"); the contract for values with
    // no natural JSON form is their repr, and the script's work is not thrown away.
    let r = result_of("a = [1]\na.append(a)\nd = {'k': 1}\nd['self'] = d\n[a, d]");
    assert_eq!(r, json!("[[1, [...]], {'k': 1, 'self': {...}}]"));
    // The same list twice is shared, not cyclic.
    let r = result_of("a = [1, 2]\n[a, a, {'x': a}]");
    assert_eq!(r, json!([[1, 2], [1, 2], {"x": [1, 2]}]));
}

#[test]
fn deep_acyclic_results_stay_json() {
    let r = result_of("x = []\ny = x\nfor _ in range(99):\n    y.append([])\n    y = y[0]\nx");
    let mut depth = 0;
    let mut node = &r;
    while let Some(first) = node.as_array().and_then(|a| a.first()) {
        depth += 1;
        node = first;
    }
    assert_eq!((depth, node), (99, &json!([])));
    // Deeper than 100 levels the innermost part is its repr (the engine's JSON stops at 128).
    let v = run("x = []\ny = x\nfor _ in range(150):\n    y.append([])\n    y = y[0]\nx");
    assert_eq!(v["ok"], json!(true), "{v}");
}

#[test]
fn messages_name_c_types_not_rust_ones() {
    for code in [
        "len(range(2**64))",
        "'x'.ljust(10**20)",
        "(1).to_bytes(10**20, 'big')",
    ] {
        let v = run(code);
        assert_eq!(
            v["error"],
            json!("OverflowError: Python int too large to convert to C ssize_t (line 1)"),
            "{code}"
        );
    }
    let v = run("'x' * 10**20");
    assert_eq!(
        v["error"],
        json!("OverflowError: cannot fit 'int' into an index-sized integer (line 1)")
    );
}

#[test]
fn the_design_documents_standard_modules_import() {
    let r = result_of(
        "import asyncio, json, re, math, datetime, time, collections, itertools, functools\n\
         import dataclasses, typing, enum, string, textwrap, statistics, decimal, fractions\n\
         import base64, hashlib, random, copy, operator, heapq, bisect, warnings, io, pathlib\n\
         [statistics.median([3, 1, 2]), str(decimal.Decimal('1.10') + decimal.Decimal('2.205')),\n \
         str(fractions.Fraction(1, 3) + fractions.Fraction(1, 6)), hashlib.sha256(b'abc').hexdigest()[:8],\n \
         base64.b64encode(b'hi').decode(), textwrap.shorten('hello world foo bar', 12),\n \
         datetime.datetime.fromtimestamp(0, datetime.timezone.utc).isoformat(),\n \
         random.Random(42).randint(1, 100), heapq.nsmallest(2, [5, 1, 3]), bisect.bisect([1, 3], 2)]",
    );
    assert_eq!(
        r,
        json!([
            2,
            "3.305",
            "1/2",
            "ba7816bf",
            "aGk=",
            "hello [...]",
            "1970-01-01T00:00:00+00:00",
            82,
            [1, 3],
            1
        ])
    );
}

#[test]
fn logging_queue_and_concurrent_futures_import_and_log_to_the_output() {
    let v = run_script(
        "import logging, queue, concurrent.futures\n\
         logging.basicConfig(level=logging.INFO, format='%(levelname)s %(name)s: %(message)s')\n\
         logging.getLogger('agent').info('fetched %d rows', 3)\n\
         q = queue.Queue()\nq.put('item')\nq.get()",
        &[],
    )
    .json();
    assert_eq!(v["result"], json!("item"), "{v}");
    assert_eq!(v["output"], json!("INFO agent: fetched 3 rows\n"), "{v}");
}
