"""Specs of the `shell-basics` set: small terminal tasks, each solvable with one shell command.

Each spec: name, instruction, env files (path -> content under /app), checks (bash conditions run
in /app, each with a description), the oracle command, and whether python3 is needed.
Every check must fail on the untouched environment, so a no-op scores 0.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field


@dataclass
class Spec:
    name: str
    instruction: str
    checks: list[tuple[str, str]]
    solve: str
    files: dict[str, str] = field(default_factory=dict)
    python: bool = False
    tags: tuple[str, ...] = ()


def q(s: str) -> str:
    return shlex.quote(s)


def content(path: str, expected: str) -> tuple[str, str]:
    """File exists and its text equals `expected` (trailing newlines ignored)."""
    return f'[ -f {q(path)} ] && [ "$(cat {q(path)})" = {q(expected)} ]', f"{path} has the expected content"


def number(path: str, expected: int) -> tuple[str, str]:
    return f'[ -f {q(path)} ] && [ "$(tr -d " \\n\\t" < {q(path)})" = {expected} ]', f"{path} holds {expected}"


def output(cmd: str, expected: str) -> tuple[str, str]:
    return f'[ "$({cmd} 2>/dev/null)" = {q(expected)} ]', f"`{cmd}` prints the expected output"


def exists(path: str) -> tuple[str, str]:
    return f"[ -e {q(path)} ]", f"{path} exists"


def missing(path: str) -> tuple[str, str]:
    return f"[ ! -e {q(path)} ] && [ ! -L {q(path)} ]", f"{path} is gone"


def isdir(path: str) -> tuple[str, str]:
    return f"[ -d {q(path)} ]", f"{path} is a directory"


def py(code: str) -> tuple[str, str]:
    return f"python3 -c {q(code)}", f"python: {code}"


LOG7 = "".join(f"event {i}\n" for i in range(1, 8))
DATA10 = "".join(f"line {i}\n" for i in range(1, 11))

SPECS: list[Spec] = [
    Spec("create-file", "Create the file /app/hello.txt containing the text: hello world",
         [content("hello.txt", "hello world")], 'echo "hello world" > /app/hello.txt'),
    Spec("create-empty-file", "Create an empty file named /app/empty.txt.",
         [("[ -f empty.txt ] && [ ! -s empty.txt ]", "empty.txt exists and is empty")], "touch /app/empty.txt"),
    Spec("append-line", "Append the line `third line` to the end of /app/notes.txt.",
         [content("notes.txt", "first line\nsecond line\nthird line")], 'echo "third line" >> /app/notes.txt',
         files={"notes.txt": "first line\nsecond line\n"}),
    Spec("rename-file", "Rename the file /app/old.txt to /app/new.txt.",
         [missing("old.txt"), content("new.txt", "keep me")], "mv /app/old.txt /app/new.txt",
         files={"old.txt": "keep me\n"}),
    Spec("delete-file", "Delete the file /app/trash.txt. Leave /app/keep.txt alone.",
         [missing("trash.txt"), content("keep.txt", "important")], "rm /app/trash.txt",
         files={"trash.txt": "junk\n", "keep.txt": "important\n"}),
    Spec("make-dir", "Create a directory named /app/data.", [isdir("data")], "mkdir /app/data"),
    Spec("make-nested-dirs", "Create the nested directories /app/a/b/c.", [isdir("a/b/c")], "mkdir -p /app/a/b/c"),
    Spec("copy-file", "Copy /app/src.txt to /app/dst.txt (keep the original).",
         [content("src.txt", "copy this text"), content("dst.txt", "copy this text")], "cp /app/src.txt /app/dst.txt",
         files={"src.txt": "copy this text\n"}),
    Spec("count-lines", "Write the number of lines in /app/log.txt into /app/count.txt (just the number).",
         [number("count.txt", 7)], "wc -l < /app/log.txt > /app/count.txt", files={"log.txt": LOG7}),
    Spec("replace-word", "Replace every occurrence of the word cat with dog in /app/pets.txt.",
         [content("pets.txt", "I have a dog.\nThe dog sleeps all day.")], "sed -i 's/cat/dog/g' /app/pets.txt",
         files={"pets.txt": "I have a cat.\nThe cat sleeps all day.\n"}),
    Spec("fix-typo", "The file /app/readme.txt has a typo: `Helo` should be `Hello`. Fix it.",
         [content("readme.txt", "Hello world\nThis line is fine.")], "sed -i 's/Helo/Hello/' /app/readme.txt",
         files={"readme.txt": "Helo world\nThis line is fine.\n"}),
    Spec("greet-script", "Create a bash script /app/greet.sh so that `bash /app/greet.sh Bob` prints exactly: Hello, Bob!",
         [output("bash greet.sh Bob", "Hello, Bob!"), output("bash greet.sh Ann", "Hello, Ann!")],
         """echo 'echo "Hello, $1!"' > /app/greet.sh"""),
    Spec("python-square", "Create /app/square.py defining a function square(x) that returns x multiplied by itself.",
         [py("from square import square; assert square(3) == 9 and square(-2) == 4")],
         "printf 'def square(x):\\n    return x * x\\n' > /app/square.py", python=True),
    Spec("move-into-dir", "Move the file /app/report.txt into the directory /app/archive/.",
         [missing("report.txt"), content("archive/report.txt", "q3 numbers")], "mv /app/report.txt /app/archive/",
         files={"report.txt": "q3 numbers\n", "archive/old.txt": "q2 numbers\n"}),
    Spec("remove-dir", "Delete the directory /app/tmpdir and everything inside it.",
         [missing("tmpdir"), content("keep.txt", "stay")], "rm -rf /app/tmpdir",
         files={"tmpdir/a.txt": "a\n", "tmpdir/sub/b.txt": "b\n", "keep.txt": "stay\n"}),
    Spec("make-executable", "Make the script /app/run.sh executable.",
         [("[ -x run.sh ]", "run.sh is executable")], "chmod +x /app/run.sh",
         files={"run.sh": "#!/bin/bash\necho ok\n"}),
    Spec("count-words", "Write the number of words in /app/words.txt into /app/wordcount.txt (just the number).",
         [number("wordcount.txt", 9)], "wc -w < /app/words.txt > /app/wordcount.txt",
         files={"words.txt": "the quick brown fox\njumps over the lazy dog\n"}),
    Spec("uppercase", "Write the contents of /app/lower.txt converted to UPPERCASE into /app/upper.txt.",
         [content("upper.txt", "MAKE ME LOUD\nPLEASE")], "tr a-z A-Z < /app/lower.txt > /app/upper.txt",
         files={"lower.txt": "make me loud\nplease\n"}),
    Spec("sort-lines", "Sort the lines of /app/names.txt alphabetically and write them into /app/sorted.txt.",
         [content("sorted.txt", "alice\nbob\ncharlie\ndave")], "sort /app/names.txt > /app/sorted.txt",
         files={"names.txt": "charlie\nalice\ndave\nbob\n"}),
    Spec("unique-lines",
         "Write the distinct lines of /app/colors.txt, sorted alphabetically, one per line, into /app/unique.txt.",
         [content("unique.txt", "blue\ngreen\nred")], "sort -u /app/colors.txt > /app/unique.txt",
         files={"colors.txt": "red\nblue\nred\ngreen\nblue\n"}),
    Spec("first-lines", "Write the first 3 lines of /app/data.txt into /app/top3.txt.",
         [content("top3.txt", "line 1\nline 2\nline 3")], "head -n 3 /app/data.txt > /app/top3.txt",
         files={"data.txt": DATA10}),
    Spec("last-lines", "Write the last 2 lines of /app/data.txt into /app/last2.txt.",
         [content("last2.txt", "line 9\nline 10")], "tail -n 2 /app/data.txt > /app/last2.txt",
         files={"data.txt": DATA10}),
    Spec("grep-errors", "Write every line of /app/app.txt that contains ERROR into /app/errors.txt.",
         [content("errors.txt", "ERROR disk full\nERROR disk still full")], "grep ERROR /app/app.txt > /app/errors.txt",
         files={"app.txt": "INFO start\nERROR disk full\nINFO retry\nERROR disk still full\nINFO done\n"}),
    Spec("count-matches",
         "Write the number of lines in /app/server.txt that contain WARN into /app/warn_count.txt (just the number).",
         [number("warn_count.txt", 3)], "grep -c WARN /app/server.txt > /app/warn_count.txt",
         files={"server.txt": "WARN low memory\nINFO ok\nWARN slow disk\nINFO ok\nWARN high load\n"}),
    Spec("insert-header", "Insert the line `# settings` as the first line of /app/config.txt.",
         [content("config.txt", "# settings\na=1\nb=2")], "sed -i '1i # settings' /app/config.txt",
         files={"config.txt": "a=1\nb=2\n"}),
    Spec("delete-line", "Delete the line `banana` from /app/list.txt.",
         [content("list.txt", "apple\ncherry")], "sed -i '/^banana$/d' /app/list.txt",
         files={"list.txt": "apple\nbanana\ncherry\n"}),
    Spec("change-setting", "In /app/settings.txt change `port=8080` to `port=9090`.",
         [content("settings.txt", "host=localhost\nport=9090")], "sed -i 's/port=8080/port=9090/' /app/settings.txt",
         files={"settings.txt": "host=localhost\nport=8080\n"}),
    Spec("symlink", "Create a symbolic link /app/link.txt that points to /app/target.txt.",
         [("[ -L link.txt ]", "link.txt is a symlink"), content("link.txt", "target")],
         "ln -s /app/target.txt /app/link.txt", files={"target.txt": "target\n"}),
    Spec("concat-files", "Concatenate /app/part1.txt followed by /app/part2.txt into /app/both.txt.",
         [content("both.txt", "alpha\nbeta")], "cat /app/part1.txt /app/part2.txt > /app/both.txt",
         files={"part1.txt": "alpha\n", "part2.txt": "beta\n"}),
    Spec("two-lines", "Create /app/pair.txt with exactly two lines: `first` then `second`.",
         [content("pair.txt", "first\nsecond")], "printf 'first\\nsecond\\n' > /app/pair.txt"),
    Spec("arithmetic", "Write the result of 6 times 7 into /app/answer.txt (just the number).",
         [number("answer.txt", 42)], "echo $((6 * 7)) > /app/answer.txt"),
    Spec("count-bytes", "Write the size of /app/blob.txt in bytes into /app/size.txt (just the number).",
         [number("size.txt", 11)], "wc -c < /app/blob.txt > /app/size.txt", files={"blob.txt": "abcdefghij\n"}),
    Spec("list-dir", "Write the names of the files in /app/docs, sorted, one per line, into /app/listing.txt.",
         [content("listing.txt", "a.md\nb.md\nc.md")], "ls /app/docs > /app/listing.txt",
         files={"docs/b.md": "b\n", "docs/a.md": "a\n", "docs/c.md": "c\n"}),
    Spec("count-py-files",
         "Write the number of .py files under /app/src (subdirectories included) into /app/pycount.txt (just the number).",
         [number("pycount.txt", 3)], "find /app/src -name '*.py' | wc -l > /app/pycount.txt",
         files={"src/a.py": "a = 1\n", "src/b.py": "b = 2\n", "src/sub/c.py": "c = 3\n", "src/notes.txt": "x\n"}),
    Spec("tar-archive", "Create a tar archive /app/project.tar containing the directory project.",
         [("tar -tf project.tar 2>/dev/null | grep -qx 'project/main.txt'", "project.tar holds project/main.txt")],
         "cd /app && tar -cf project.tar project",
         files={"project/main.txt": "main\n", "project/readme.md": "readme\n"}),
    Spec("gzip-file", "Compress /app/big.txt with gzip, so that /app/big.txt.gz exists.",
         [("[ \"$(gzip -dc big.txt.gz 2>/dev/null)\" = 'compress me please' ]", "big.txt.gz holds big.txt")],
         "gzip /app/big.txt", files={"big.txt": "compress me please\n"}),
    Spec("fix-python-typo", "The file /app/calc.py has a typo (`retrun`). Fix it so that add(a, b) returns a + b.",
         [py("from calc import add; assert add(2, 3) == 5")], "sed -i 's/retrun/return/' /app/calc.py",
         files={"calc.py": "def add(a, b):\n    retrun a + b\n"}, python=True),
    Spec("fix-python-bug", "is_even(n) in /app/is_even.py gives the wrong answer. Fix it so it returns True for even n.",
         [py("from is_even import is_even; assert is_even(4) and not is_even(7) and is_even(0)")],
         "sed -i 's/== 1/== 0/' /app/is_even.py",
         files={"is_even.py": "def is_even(n):\n    return n % 2 == 1\n"}, python=True),
    Spec("count-script", "Create a bash script /app/count.sh that prints the numbers 1 to 5, one per line.",
         [output("bash count.sh", "1\n2\n3\n4\n5")], "echo 'seq 1 5' > /app/count.sh"),
    Spec("json-file", 'Create /app/config.json containing exactly: {"debug": true}',
         [content("config.json", '{"debug": true}')], """echo '{"debug": true}' > /app/config.json"""),
    Spec("hello-python", "Create a Python script /app/hello.py that prints exactly: Hello from Python",
         [output("python3 hello.py", "Hello from Python")], "echo 'print(\"Hello from Python\")' > /app/hello.py",
         python=True),
    Spec("reverse-lines", "Write the lines of /app/steps.txt in reverse order into /app/reversed.txt.",
         [content("reversed.txt", "three\ntwo\none")], "tac /app/steps.txt > /app/reversed.txt",
         files={"steps.txt": "one\ntwo\nthree\n"}),
    Spec("first-column",
         "/app/people.txt has lines `name,age`. Write just the names, one per line, into /app/names.txt.",
         [content("names.txt", "alice\nbob\ncarol")], "cut -d, -f1 /app/people.txt > /app/names.txt",
         files={"people.txt": "alice,30\nbob,25\ncarol,41\n"}),
    Spec("sum-numbers", "Write the sum of the numbers in /app/nums.txt into /app/sum.txt (just the number).",
         [number("sum.txt", 18)], "awk '{s += $1} END {print s}' /app/nums.txt > /app/sum.txt",
         files={"nums.txt": "3\n5\n10\n"}),
    Spec("line-number",
         "Write the line number of the line `needle` in /app/haystack.txt into /app/line.txt (just the number).",
         [number("line.txt", 4)], "grep -n -x needle /app/haystack.txt | cut -d: -f1 > /app/line.txt",
         files={"haystack.txt": "hay\nstraw\nhay\nneedle\nhay\n"}),
    Spec("replace-tabs", "Replace every tab character in /app/tabs.txt with a single space.",
         [content("tabs.txt", "a b c\nd e")], "sed -i 's/\\t/ /g' /app/tabs.txt", files={"tabs.txt": "a\tb\tc\nd\te\n"}),
    Spec("rename-batch", "Rename every .txt file in /app/batch to end in .md instead (one.txt becomes one.md).",
         [content("batch/one.md", "1"), content("batch/two.md", "2"), missing("batch/one.txt"), missing("batch/two.txt")],
         'for f in /app/batch/*.txt; do mv "$f" "${f%.txt}.md"; done',
         files={"batch/one.txt": "1\n", "batch/two.txt": "2\n"}),
    Spec("python-biggest",
         "Create /app/biggest.py defining a function biggest(numbers) that returns the largest number in the list.",
         [py("from biggest import biggest; assert biggest([3, 9, 2]) == 9 and biggest([-5, -1]) == -1")],
         "printf 'def biggest(numbers):\\n    return max(numbers)\\n' > /app/biggest.py", python=True),
    Spec("bash-function",
         "Create /app/lib.sh defining a bash function `double` that prints twice its argument (`double 4` prints 8).",
         [output("bash -c 'source ./lib.sh; double 4'", "8"), output("bash -c 'source ./lib.sh; double 21'", "42")],
         "echo 'double() { echo $(( $1 * 2 )); }' > /app/lib.sh"),
    Spec("private-file", "Make /app/secret.txt readable and writable by its owner only (mode 600).",
         [("[ \"$(stat -c %a secret.txt)\" = 600 ]", "secret.txt has mode 600")], "chmod 600 /app/secret.txt",
         files={"secret.txt": "s3cret\n"}),
    Spec("write-path", "Write the absolute path of the current working directory /app into /app/where.txt.",
         [content("where.txt", "/app")], "pwd > /app/where.txt"),
    # More of the easiest kind: a 135M model solves these only now and then, which is the point.
    Spec("create-note", "Create the file /app/note.txt containing the text: buy milk",
         [content("note.txt", "buy milk")], 'echo "buy milk" > /app/note.txt'),
    Spec("create-name-file", "Create the file /app/name.txt containing the text: legorl",
         [content("name.txt", "legorl")], "echo legorl > /app/name.txt"),
    Spec("create-number-file", "Create the file /app/number.txt containing the number 7.",
         [number("number.txt", 7)], "echo 7 > /app/number.txt"),
    Spec("make-logs-dir", "Create a directory named /app/logs.", [isdir("logs")], "mkdir /app/logs"),
    Spec("delete-cache", "Delete the file /app/cache.txt.", [missing("cache.txt")], "rm /app/cache.txt",
         files={"cache.txt": "stale\n"}),
    Spec("touch-done", "Create an empty file named /app/done.txt.",
         [("[ -f done.txt ] && [ ! -s done.txt ]", "done.txt exists and is empty")], "touch /app/done.txt"),
    Spec("rename-draft", "Rename the file /app/draft.txt to /app/final.txt.",
         [missing("draft.txt"), content("final.txt", "my essay")], "mv /app/draft.txt /app/final.txt",
         files={"draft.txt": "my essay\n"}),
    Spec("copy-config", "Copy /app/config.txt to /app/backup.txt (keep the original).",
         [content("config.txt", "mode=fast"), content("backup.txt", "mode=fast")],
         "cp /app/config.txt /app/backup.txt", files={"config.txt": "mode=fast\n"}),
    Spec("append-name", "Append the line `carol` to the end of /app/names.txt.",
         [content("names.txt", "alice\nbob\ncarol")], "echo carol >> /app/names.txt",
         files={"names.txt": "alice\nbob\n"}),
]
