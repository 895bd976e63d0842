"""Every language against every verdict, with real programs in the real jail.

Each program reads two integers and should print their sum; the variants get it
wrong, crash, loop, allocate or print without end, or do not compile. Compiled
variants share one compile cache per session, so a rerun compiles nothing.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandbox_workers import Executor, ExecutorConfig
from sandbox_workers.jail import IsolationUnavailable, JailConfig, JailSandbox
from schemas import Completion, IoSuite, Limits, Verdict
from tests.sandbox.specs import all_specs

pytestmark = pytest.mark.sandbox

AC, WA, RE, TLE, MLE, OLE, CE = (
    Verdict.ACCEPTED,
    Verdict.WRONG_ANSWER,
    Verdict.RUNTIME_ERROR,
    Verdict.TIME_LIMIT,
    Verdict.MEMORY_LIMIT,
    Verdict.OUTPUT_LIMIT,
    Verdict.COMPILE_ERROR,
)

PROGRAMS: dict[str, dict[Verdict, str]] = {
    "python": {
        AC: "a, b = map(int, input().split())\nprint(a + b)\n",
        WA: "a, b = map(int, input().split())\nprint(a - b)\n",
        RE: "a, b = map(int, input().split())\nprint(a // 0)\n",
        TLE: "while True:\n    pass\n",
        MLE: "blocks = []\nwhile True:\n    blocks.append(bytearray(1 << 24))\n",
        OLE: "while True:\n    print('x' * 1000)\n",
        CE: "def main(:\n    pass\n",
    },
    "javascript": {
        AC: "const [a, b] = require('fs').readFileSync(0, 'utf8')"
        ".trim().split(/\\s+/).map(Number);\nconsole.log(a + b);\n",
        WA: "console.log(0);\n",
        RE: "throw new Error('boom');\n",
        TLE: "while (true) {}\n",
        MLE: "const keep = [];\nwhile (true) keep.push(new Array(1 << 20).fill(7));\n",
        OLE: "while (true) console.log('x'.repeat(1000));\n",
    },
    "c": {
        AC: "#include <stdio.h>\n"
        'int main(void){int a,b;scanf("%d %d",&a,&b);printf("%d\\n",a+b);}\n',
        WA: '#include <stdio.h>\nint main(void){puts("0");}\n',
        RE: "#include <stdlib.h>\nint main(void){abort();}\n",
        TLE: "int main(void){volatile unsigned long x=0;for(;;)x++;}\n",
        MLE: "#include <stdlib.h>\n#include <string.h>\n"
        "int main(void){for(;;){char*p=malloc(1<<24);if(!p)return 3;memset(p,1,1<<24);}}\n",
        OLE: '#include <stdio.h>\nint main(void){for(;;)puts("xxxxxxxxxxxxxxxxxxxxxxxx");}\n',
        CE: "int main(void) { return }\n",
    },
    "cpp": {
        AC: "#include <iostream>\nint main(){long a,b;std::cin>>a>>b;std::cout<<a+b<<'\\n';}\n",
        WA: "#include <iostream>\nint main(){std::cout<<-1<<'\\n';}\n",
        RE: '#include <stdexcept>\nint main(){throw std::runtime_error("boom");}\n',
        TLE: "int main(){volatile unsigned long x=0;for(;;)x++;}\n",
        MLE: "#include <vector>\nint main(){std::vector<std::vector<char>> v;"
        "for(;;)v.emplace_back(1<<24,'x');}\n",
        OLE: '#include <cstdio>\nint main(){for(;;)std::puts("xxxxxxxxxxxxxxxxxxxxxxxx");}\n',
        CE: "int main() { undeclared_function(); }\n",
    },
    "go": {
        AC: 'package main\nimport "fmt"\n'
        "func main(){var a,b int;fmt.Scan(&a,&b);fmt.Println(a+b)}\n",
        WA: 'package main\nimport "fmt"\nfunc main(){fmt.Println(0)}\n',
        RE: 'package main\nfunc main(){panic("boom")}\n',
        TLE: "package main\nfunc main(){x:=0\nfor{x++}}\n",
        MLE: "package main\nfunc main(){var keep [][]byte\nfor{b:=make([]byte,1<<24)\n"
        "for i:=range b{b[i]=1}\nkeep=append(keep,b)}}\n",
        OLE: 'package main\nimport "fmt"\nfunc main(){for{fmt.Println("xxxxxxxxxxxxxxxx")}}\n',
        CE: "package main\nfunc main(){unused := 1}\n",
    },
    "java": {
        # A public class not named Main: the file and the run follow its name.
        AC: "import java.util.*;\npublic class Solution { public static void main(String[] x) {"
        " Scanner s = new Scanner(System.in);"
        " System.out.println(s.nextLong() + s.nextLong()); } }\n",
        RE: "class Main { public static void main(String[] a) {"
        ' throw new RuntimeException("boom"); } }\n',
        MLE: "import java.util.*;\nclass Main { public static void main(String[] a) {"
        " List<long[]> keep = new ArrayList<>(); while (true) keep.add(new long[1 << 20]); } }\n",
        CE: "class Main { public static void main(String[] a) { int x = } }\n",
    },
    "rust": {
        AC: "use std::io::Read;\nfn main(){let mut s=String::new();"
        "std::io::stdin().read_to_string(&mut s).unwrap();"
        "let v:Vec<i64>=s.split_whitespace().map(|x|x.parse().unwrap()).collect();"
        'println!("{}",v[0]+v[1]);}\n',
        RE: 'fn main(){ panic!("boom"); }\n',
        CE: 'fn main(){ let x: i32 = "a"; }\n',
    },
    "sql": {
        AC: "SELECT a + b FROM pair;",
        WA: "SELECT a - b FROM pair;",
        RE: "SELECT * FROM no_such_table;",
        TLE: "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c)"
        " SELECT count(*) FROM c;",
        MLE: "SELECT length(randomblob(900000000));",
        OLE: "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c;",
    },
}

# The languages added with a spec (tests/sandbox/specs/) join the table.
PROGRAMS.update({spec.language: dict(spec.programs) for spec in all_specs()})

SQL_SCHEMA = "CREATE TABLE pair(a INTEGER, b INTEGER); INSERT INTO pair VALUES (2, 3);"
# Stopping at the first failure keeps the time-limit cases at one timeout each.
IO = IoSuite(inputs=["2 3\n", "40 2\n"], outputs=["5\n", "42\n"], stop_on_first_failure=True)
SQL_IO = IoSuite(inputs=[SQL_SCHEMA], outputs=["5\n"])
LIMITS = Limits(time_s=1.0, total_time_s=10.0, memory_mb=128, output_kb=64)
# A memory-limit case gets CPU time to spare, so that only the memory limit can end it:
# near the limit the kernel's reclaim is charged to the program, and bash's string
# doubling reached 128 MB after 0.8-1.0 s of CPU here (once past a 1 s limit: time_limit).
MEMORY_LIMITS = Limits(time_s=5.0, total_time_s=10.0, memory_mb=128, output_kb=64)

CASES = [
    pytest.param(language, verdict, id=f"{language}-{verdict.value}")
    for language, programs in PROGRAMS.items()
    for verdict in programs
]


@pytest.fixture(scope="module")
def executor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Executor]:
    try:
        sandbox = JailSandbox(JailConfig(strict=False))
    except IsolationUnavailable as exc:
        pytest.fail(f"no jail on this host (see rewardbus doctor): {exc}")
    cache = tmp_path_factory.getbasetemp() / "executor-cache"
    yield Executor(ExecutorConfig(compile_cache_dir=cache), sandbox)
    sandbox.close()


def test_every_language_is_available(executor: Executor) -> None:
    assert set(executor.languages) == set(PROGRAMS)
    assert all(executor.languages.values())


@pytest.mark.parametrize(("language", "verdict"), CASES)
async def test_verdict(executor: Executor, language: str, verdict: Verdict) -> None:
    suite = SQL_IO if language == "sql" else IO
    completion = Completion(
        sample_id=f"{language}-{verdict.value}",
        language=language,
        code=PROGRAMS[language][verdict],
        tests=suite,
        limits=MEMORY_LIMITS if verdict is MLE else LIMITS,
    )
    event = await executor.run(completion)
    assert event.verdict is verdict, (event.message, event.tests, event.stderr_tail[-500:])
    assert event.total == len(suite.inputs)
    if verdict is Verdict.ACCEPTED:
        assert (event.score, event.passed) == (1.0, event.total)
        assert all(t.wall_ms > 0 and t.cpu_ms >= 0 and t.peak_memory_kb >= 0 for t in event.tests)
    else:
        assert event.score == 0.0
    if verdict is Verdict.COMPILE_ERROR:
        assert event.message and not event.tests
    if verdict is Verdict.RUNTIME_ERROR:
        assert event.stderr_tail or event.tests[0].message


@pytest.mark.parametrize("language", ["c", "cpp", "go", "java", "rust"])
async def test_compiles_are_cached(executor: Executor, language: str) -> None:
    completion = Completion(
        sample_id="cached", language=language, code=PROGRAMS[language][AC], tests=IO, limits=LIMITS
    )
    await executor.run(completion)
    misses = executor.compile_cache.stats.misses
    event = await executor.run(completion)
    assert event.verdict is AC
    assert executor.compile_cache.stats.misses == misses


async def test_java_package_declaration_is_tolerated(executor: Executor) -> None:
    code = "package com.example.solution;\n\n" + PROGRAMS["java"][AC]
    completion = Completion(sample_id="pkg", language="java", code=code, tests=IO, limits=LIMITS)
    assert (await executor.run(completion)).verdict is AC


async def test_compile_cache_survives_a_restart(
    executor: Executor, tmp_path_factory: pytest.TempPathFactory
) -> None:
    del executor  # the module's executor filled the shared cache directory
    cache = tmp_path_factory.getbasetemp() / "executor-cache"
    sandbox = JailSandbox(JailConfig(strict=False))
    try:
        fresh = Executor(ExecutorConfig(compile_cache_dir=cache), sandbox)
        completion = Completion(
            sample_id="disk", language="c", code=PROGRAMS["c"][AC], tests=IO, limits=LIMITS
        )
        event = await fresh.run(completion)
    finally:
        sandbox.close()
    assert event.verdict is AC
    assert fresh.compile_cache.stats.disk_hits == 1
    assert fresh.compile_cache.stats.misses == 0
