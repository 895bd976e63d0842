"""Fork-at-open zygotes (Ruby, PHP, Racket): as a cold run, isolated, and actually used.

A Ruby, PHP or Racket request names ``warm_after`` (a file it opens once started): its zygote runs
the request's own command line with ``librbjail-warm.so`` preloaded and forks
each execution inside the interpreter's first open of that file
(``native/rbjail_warm.c``). Programs run through a cold jail and a warm pool
must report the same; what one execution does never reaches the next; and the
executor's judgements go through the pool. (The Racket programs here are not
compiled first: racket compiles them in memory, as it would a module without its
``.zo``.)
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sandbox_workers import Executor, ExecutorConfig
from sandbox_workers.jail import JailSandbox
from sandbox_workers.languages import BASE_ENV, lookup
from sandbox_workers.pool import PoolConfig, pooled_command
from sandbox_workers.sandbox import ExecRequest, ExecResult, SandboxFault
from schemas import Completion, IoSuite, Limits, Verdict
from tests.sandbox.jails import strict_sandbox

pytestmark = pytest.mark.sandbox

ENTRY = {"ruby": "solution.rb", "php": "solution.php", "racket": "solution.rkt", "r": "solution.R"}

# What each program reports about the process it runs in: all of it must be what a
# cold run reports (pid, argv, environment, cwd, stdin, its own file).
REPORT = {
    "ruby": """
x = STDIN.read
puts [Process.pid, $0, ARGV, ENV.to_h, Dir.pwd, x, File.read(__FILE__).size].inspect
STDERR.puts "to stderr"
exit 3
""",
    "php": """<?php
$x = stream_get_contents(STDIN);
echo json_encode([getmypid(), $argv, getenv(), getcwd(), $x, filesize(__FILE__)]), "\\n";
fwrite(STDERR, "to stderr\\n");
exit(3);
""",
    "racket": """#lang racket
(require racket/os)
(define x (port->string (current-input-port)))
(define names (environment-variables-names (current-environment-variables)))
(write (list (getpid) (current-command-line-arguments)
             (sort (map bytes->string/utf-8 names) string<?)
             (path->string (current-directory)) x (file-size "solution.rkt")))
(newline)
(eprintf "to stderr~n")
(exit 3)
""",
    "r": """
x <- readLines(file("stdin"))
cat(Sys.getpid(), commandArgs(), sort(names(Sys.getenv())), getwd(), x, sep = "|")
cat("|", file.size("solution.R"), "\\n")
cat("to stderr\\n", file = stderr())
quit(status = 3)
""",
}
# Leaves what it can behind, then reports what an earlier run left: nothing may be.
LEAVE = {
    "ruby": """
found = [File.exist?("/tmp/left"), File.exist?("left"), ENV.key?("LEFT"), $left.nil?]
File.write("/tmp/left", "x"); File.write("left", "x"); ENV["LEFT"] = "1"; $left = 1
puts found.inspect
""",
    "php": """<?php
$found = [file_exists("/tmp/left"), file_exists("left"), getenv("LEFT") !== false];
file_put_contents("/tmp/left", "x"); file_put_contents("left", "x"); putenv("LEFT=1");
echo json_encode($found), "\\n";
""",
    "racket": """#lang racket
(define found (list (file-exists? "/tmp/left") (file-exists? "left") (getenv "LEFT")))
(with-output-to-file "/tmp/left" (lambda () (display "x")))
(with-output-to-file "left" (lambda () (display "x")))
(void (putenv "LEFT" "1"))
(writeln found)
""",
    "r": """
found <- c(file.exists("/tmp/left"), file.exists("left"), Sys.getenv("LEFT") != "")
writeLines("x", "/tmp/left"); writeLines("x", "left"); Sys.setenv(LEFT = "1")
cat(found, "\\n")
""",
}
RANDOM = {
    "ruby": "puts rand(2**62)",
    "php": "<?php echo random_int(0, PHP_INT_MAX), ' ', mt_rand(), ' ', rand(), \"\\n\";",
    "racket": "#lang racket\n(displayln (list (random 4294967087) (random 4294967087)))",
    "r": 'cat(sprintf("%.15f", runif(2)), "\\n")',
}
SUM = {
    "ruby": "a, b = STDIN.read.split.map(&:to_i); puts a + b",
    "php": '<?php [$a, $b] = array_map("intval", explode(" ", trim(fgets(STDIN)))); echo $a + $b;',
    "racket": "#lang racket\n(displayln (+ (read) (read)))",
    "r": 'x <- scan(file("stdin"), quiet = TRUE); cat(sum(x), "\\n")',
}
LIMITS = Limits(time_s=2.0)
THREADS = """
q = Queue.new
producer = Thread.new { 5.times { |i| q << i }; q << nil }
got = []
while (item = q.pop)
  got << item
end
producer.join
sums = 2.times.map { Thread.new { (1..200_000).sum } }.map(&:value)
puts got.inspect, sums.inspect
"""


@pytest.fixture(scope="module")
def toolchains(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    state = tmp_path_factory.mktemp("warm-languages")
    found = {}
    for name in ENTRY:
        language = lookup(name)
        assert language is not None
        toolchain = language.discover(state, state)
        if toolchain is None:
            pytest.fail(f"{name} is not installed here (make toolchains)")
        found[name] = toolchain
    return found


def request(toolchains: dict[str, Any], name: str, code: str, stdin: bytes = b"") -> ExecRequest:
    """The request the executor makes for ``code`` (languages/<name>.py's launch)."""
    language = lookup(name)
    assert language is not None
    toolchain = toolchains[name]
    launch = language.launch(toolchain, ENTRY[name], Limits())
    return ExecRequest(
        argv=launch.argv,
        files={**launch.files, ENTRY[name]: code.encode()},
        stdin=stdin,
        env={**BASE_ENV, **launch.env},
        memory_mb=256 + launch.memory_overhead_mb,
        time_s=5.0,
        extra_mounts=toolchain.mounts,
        warm_after=launch.warm_after,
    )


def observed(result: ExecResult) -> tuple[Any, ...]:
    return (result.exit_code, result.signal, result.stdout, result.stderr, result.timed_out)


@pytest.mark.parametrize("name", list(ENTRY))
def test_their_requests_are_poolable(toolchains: dict[str, Any], name: str) -> None:
    plain = request(toolchains, name, "")
    command = pooled_command(plain, ())
    assert command is not None
    assert plain.warm_after is not None and command.profile.trigger == plain.warm_after
    assert (command.profile.interpreter, *command.profile.options) == plain.argv
    assert pooled_command(plain, (), fork_at_open=False) is None


@pytest.mark.parametrize("name", list(ENTRY))
async def test_a_warm_run_reports_what_a_cold_run_does(
    cold: JailSandbox, warm: JailSandbox, toolchains: dict[str, Any], name: str
) -> None:
    served = warm.pool_stats.served if warm.pool_stats else 0
    req = request(toolchains, name, REPORT[name], stdin=b"3 4\n")
    want = await cold.execute(req)
    assert want.exit_code == 3 and b"to stderr" in want.stderr, want.stderr
    for _ in range(3):
        got = await warm.execute(req)
        assert observed(got) == observed(want)
    assert warm.pool_stats is not None and warm.pool_stats.served == served + 3


@pytest.mark.parametrize("name", list(ENTRY))
async def test_nothing_of_one_execution_reaches_the_next(
    warm: JailSandbox, toolchains: dict[str, Any], name: str
) -> None:
    req = request(toolchains, name, LEAVE[name])
    nothing = {
        "ruby": b"[false, false, false, true]\n",
        "php": b"[false,false,false]\n",
        "racket": b"(#f #f #f)\n",
        "r": b"FALSE FALSE FALSE \n",
    }[name]
    for _ in range(3):
        result = await warm.execute(req)
        assert (result.exit_code, result.stdout) == (0, nothing), result.stderr


@pytest.mark.parametrize("name", list(ENTRY))
async def test_each_execution_draws_its_own_random_numbers(
    warm: JailSandbox, toolchains: dict[str, Any], name: str
) -> None:
    req = request(toolchains, name, RANDOM[name])
    outputs = [(await warm.execute(req)).stdout for _ in range(3)]
    assert all(out.strip() for out in outputs), outputs
    assert len(set(outputs)) == 3, outputs


async def test_ruby_threads_work_in_a_forked_execution(
    cold: JailSandbox, warm: JailSandbox, toolchains: dict[str, Any]
) -> None:
    req = request(toolchains, "ruby", THREADS)
    want = await cold.execute(req)
    assert want.stdout == b"[0, 1, 2, 3, 4]\n[20000100000, 20000100000]\n", want.stderr
    assert observed(await warm.execute(req)) == observed(want)


@pytest.mark.parametrize("name", list(ENTRY))
async def test_limits_hold_in_a_forked_execution(
    warm: JailSandbox, toolchains: dict[str, Any], name: str
) -> None:
    spin = {
        "ruby": "loop {}",
        "php": "<?php while (true) {}",
        "racket": "#lang racket\n(let loop () (loop))",
        "r": "repeat {}",
    }[name]
    hog = {
        "ruby": "a = []; loop { a << 'x' * (1 << 20) }",
        "php": "<?php $a = []; while (true) { $a[] = str_repeat('x', 1 << 20); }",
        "racket": "#lang racket\n(let loop ([a '()]) (loop (cons (make-bytes (expt 2 20) 1) a)))",
        "r": "a <- list(); i <- 0; repeat { i <- i + 1; a[[i]] <- runif(1e6) }",
    }[name]
    loud = {
        "ruby": "loop { print 'y' * 4096 }",
        "php": "<?php while (true) echo str_repeat('y', 4096);",
        "racket": "#lang racket\n(let loop () (write-string (make-string 4096 #\\y)) (loop))",
        "r": 'repeat cat(strrep("y", 4096))',
    }[name]
    spun = await warm.execute(replace(request(toolchains, name, spin), time_s=1.0))
    assert spun.timed_out and spun.cpu_ms >= 900, spun
    hogged = await warm.execute(request(toolchains, name, hog))
    assert hogged.memory_exceeded or hogged.exit_code != 0, hogged
    assert not hogged.timed_out
    shouted = await warm.execute(request(toolchains, name, loud))
    assert shouted.output_exceeded, shouted


async def test_racket_sleeps_and_syncs_in_a_forked_execution(
    cold: JailSandbox, warm: JailSandbox, toolchains: dict[str, Any]
) -> None:
    # Its event loop (an epoll instance and a wake-up pipe made at start-up) is the
    # program's own, fresh: a sleep sleeps, a thread's message wakes the main thread.
    code = """#lang racket
(define ch (make-channel))
(void (thread (lambda () (sleep 1) (channel-put ch (quote woke)))))
(define started (current-inexact-milliseconds))
(displayln (sync ch))
(displayln (>= (- (current-inexact-milliseconds) started) 900))
"""
    req = request(toolchains, "racket", code)
    want = await cold.execute(req)
    assert want.stdout == b"woke\n#t\n", want.stderr
    got = await warm.execute(req)
    assert observed(got) == observed(want)
    # Slept: a second of spinning on a dead wake-up fd would cost a second of CPU (the
    # rest is compiling the module, which racket does in memory here).
    assert got.cpu_ms < 700, got


async def test_r_writes_its_temporary_files_in_a_forked_execution(
    cold: JailSandbox, warm: JailSandbox, toolchains: dict[str, Any]
) -> None:
    # R made its session's directory under the zygote's /tmp; the program has its own.
    code = 'f <- tempfile(); writeLines("kept", f); cat(readLines(f), dir.exists(tempdir()), "\\n")'
    req = request(toolchains, "r", code)
    want = await cold.execute(req)
    assert want.stdout == b"kept TRUE \n", want.stderr
    assert observed(await warm.execute(req)) == observed(want)


async def test_a_program_that_cannot_be_set_up_is_the_jails_fault(
    toolchains: dict[str, Any],
) -> None:
    # The program's set-up after the fork (its fresh fds, R's temporary directory, made
    # here where it cannot be) fails: reported as the jail's, never as the program's
    # exit status, and that zygote is not used again.
    jail = strict_sandbox(PoolConfig(size=1, prewarm=1.0))
    try:
        req = request(toolchains, "ruby", "puts 6 * 7")
        broken = replace(req, env={**req.env, "R_SESSION_TMPDIR": "/no/such/dir"})
        with pytest.raises(SandboxFault, match="program setup: R_SESSION_TMPDIR"):
            await jail.execute(broken)
        stats = jail.pool_stats
        assert stats is not None and stats.discarded == 1
    finally:
        await jail.aclose()


async def test_a_trigger_never_opened_runs_cold(
    toolchains: dict[str, Any],
) -> None:
    jail = strict_sandbox(PoolConfig(size=1, prewarm=1.0, start_timeout_s=5.0))
    try:
        req = request(toolchains, "ruby", "puts 6 * 7")
        # Ruby opens solution.rb, never this name: the zygote never comes up.
        result = await jail.execute(replace(req, warm_after="never-opened.rb"))
        assert (result.exit_code, result.stdout) == (0, b"42\n")
        stats = jail.pool_stats
        assert stats is not None and stats.served == 0 and stats.cold == 1
    finally:
        await jail.aclose()


@pytest.mark.parametrize("name", list(ENTRY))
async def test_the_executor_judges_them_through_the_pool(tmp_path: Path, name: str) -> None:
    jail = strict_sandbox(PoolConfig(size=2, prewarm=0.5))
    try:
        executor = Executor(ExecutorConfig(compile_cache_dir=tmp_path), jail)
        # Five right answers of six: the last expected output is wrong on purpose.
        suite = IoSuite(
            inputs=[f"{i} 2\n" for i in range(6)],
            outputs=[f"{i + 2}\n" for i in range(5)] + ["0\n"],
        )
        completions = [
            Completion(sample_id=str(i), language=name, code=SUM[name], tests=suite, limits=LIMITS)
            for i in range(2)
        ]
        events = await asyncio.gather(*(executor.run(c) for c in completions))
        judged = [(e.verdict, round(e.score, 3)) for e in events]
        assert judged == [(Verdict.WRONG_ANSWER, 0.833)] * 2, [e.message for e in events]
        stats = jail.pool_stats
        # Every test was a poolable request (none ran in a session), and zygotes ran them.
        assert stats is not None and stats.served + stats.cold == 12 and stats.served > 0
    finally:
        await jail.aclose()
