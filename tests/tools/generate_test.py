"""recur-generate's runs compared token for token.

    generate_test.py RECUR_GENERATE MODELS_DIR CASE

MODELS_DIR holds make_text_models' models. CASE:
  resume_greedy        20 greedy tokens in one run = 10, --state-out, then
                       --state-in with no prompt and 10 more
  resume_after_prompt  --state-after-prompt -n 0, then --state-in and a
                       sampled run with a seed = one run with the prompt and
                       that seed
  chat_reread          a chat of five turns keeping the state = the same
                       chat with --reread (greedy)
  stop_text            --stop ends the text where the stop text begins
  stream_text          the text streamed in one run = the bytes of its ids;
                       and 10 + 10 tokens through a state file = 20
  penalties            a large presence penalty: greedy draws no token twice
                       (over the last N with --penalty-last-n), where
                       greedy alone repeats; options out of range refused
  min_p                --min-p 1 draws the greedy tokens at any temperature,
                       --min-p 0.01 others; out of range refused
"""

import os
import subprocess
import sys
import tempfile

exe, models, case = sys.argv[1], sys.argv[2], sys.argv[3]
model = os.path.join(models, "text.recur")
tmp = tempfile.mkdtemp(prefix="generate_test_")


def run(*args, stdin=None):
    p = subprocess.run([exe, model, *args], input=stdin, capture_output=True)
    if p.returncode != 0:
        sys.exit(f"recur-generate {' '.join(map(str, args))} failed ({p.returncode}):\n"
                 + p.stderr.decode(errors="replace"))
    return p.stdout, p.stderr.decode(errors="replace")


def ids(out):
    return [int(t) for t in out.split()]


def check(name, a, b):
    if a != b:
        sys.exit(f"{name}: differ\n  {a!r}\n  {b!r}")
    print(f"{name}: equal ({len(a)} items)")


state = os.path.join(tmp, "s.state")
greedy = ["--temperature", "0", "--print-ids"]
if case == "resume_greedy":
    whole = ids(run("-p", "hello world", "-n", "20", *greedy)[0])
    first = ids(run("-p", "hello world", "-n", "10", *greedy, "--state-out", state)[0])
    second = ids(run("-n", "10", *greedy, "--state-in", state)[0])
    if len(set(whole)) < 3:
        sys.exit(f"the run repeats a token or two, a weak check: {whole}")
    check("20 tokens vs 10 + state + 10", first + second, whole)
elif case == "resume_after_prompt":
    sampled = ["--temperature", "1.3", "--top-p", "0.95", "--seed", "7", "--print-ids"]
    whole = ids(run("-p", "User: hello", "-n", "25", *sampled)[0])
    run("-p", "User: hello", "-n", "0", "--state-out", state, "--state-after-prompt")
    resumed = ids(run("-n", "25", *sampled, "--state-in", state)[0])
    other_seed = ids(run("-n", "25", *sampled[:-3], "--seed", "8", "--print-ids",
                         "--state-in", state)[0])
    check("prompt vs saved prompt state, seed 7", resumed, whole)
    if other_seed == whole:
        sys.exit("seed 8 gave the tokens of seed 7")
elif case == "chat_reread":
    turns = b"hello\nthe world\n\nUser: a\n\xe4\xb8\xad\xe6\x96\x87!!\n"
    args = ["--chat", "-n", "12", "--temperature", "0", "--print-ids", "-p", "a preamble."]
    kept, kept_log = run(*args, stdin=turns)
    again, again_log = run(*args, "--reread", stdin=turns)
    print(kept_log, again_log)
    lines = kept.decode().splitlines()
    if len(lines) != 5 or any(not line for line in lines):
        sys.exit(f"expected 5 turns of tokens, got {lines}")
    check("kept state vs --reread", again, kept)
    read_kept = [int(l.split(" tokens read")[0].split()[-1]) for l in kept_log.splitlines()
                 if l.startswith("turn ")]
    read_again = [int(l.split(" tokens read")[0].split()[-1]) for l in again_log.splitlines()
                  if l.startswith("turn ")]
    if not all(b > a for a, b in zip(read_kept[1:], read_again[1:])):
        sys.exit(f"--reread should read more tokens each turn: {read_kept} vs {read_again}")
elif case == "stop_text":
    text = run("-p", "hello", "-n", "30", "--temperature", "0")[0].rstrip(b"\n")
    # A stop text of two bytes from the middle that holds no NUL or backslash.
    at = next(i for i in range(8, len(text) - 2)
              if all(c not in (0, 92) for c in text[i:i + 2]))
    stop = text[at:at + 2]
    first = text.find(stop)
    out = subprocess.run([exe, model, "-p", "hello", "-n", "30", "--temperature", "0",
                          "--stop", stop], capture_output=True)
    if out.returncode != 0:
        sys.exit(out.stderr.decode(errors="replace"))
    check("text up to the stop", out.stdout.rstrip(b"\n"), text[:first])
elif case == "stream_text":
    text = run("-p", "hello", "-n", "40", "--temperature", "1", "--seed", "3")[0]
    tokens = ids(run("-p", "hello", "-n", "40", "--temperature", "1", "--seed", "3",
                     "--print-ids")[0])
    vocab = [b""] + [bytes([b]) for b in range(256)] + [
        b"\n\n", b"User", b"Assistant", b": ", b" the", b" a", b"hello", b" world",
        b"\xe4\xb8\xad", b"\xe6\x96\x87", b"\xe4\xb8", b"ing", b". ", b"!!"]
    check("streamed text vs its tokens' bytes", text, b"".join(vocab[t] for t in tokens) + b"\n")
    whole = run("-p", "hello", "-n", "20", "--temperature", "0")[0]
    first = run("-p", "hello", "-n", "10", "--temperature", "0", "--state-out", state)[0]
    second = run("-n", "10", "--temperature", "0", "--state-in", state)[0]
    check("text of 10 + 10 tokens vs 20", first[:-1] + second, whole)
elif case == "penalties":
    plain = ids(run("-p", "hello", "-n", "40", *greedy)[0])
    if len(set(plain)) == len(plain):
        sys.exit(f"greedy alone draws no token twice, a weak check: {plain}")
    distinct = ids(run("-p", "hello", "-n", "40", *greedy, "--presence-penalty", "1000")[0])
    # (A run may end early at the end-of-text token.)
    if len(distinct) < 10 or len(set(distinct)) != len(distinct):
        sys.exit(f"a presence penalty of 1000 still repeats: {distinct}")
    print(f"presence penalty: {len(distinct)} distinct tokens; greedy alone {len(set(plain))} "
          f"of {len(plain)}")
    window = ids(run("-p", "hello", "-n", "40", *greedy, "--presence-penalty", "1000",
                     "--penalty-last-n", "3")[0])
    for i in range(len(window)):
        if window[i] in window[max(0, i - 3):i]:
            sys.exit(f"token {i} repeats one of the 3 before it: {window}")
    if len(set(window)) == len(window):
        sys.exit(f"with --penalty-last-n 3 no token came back after 3: {window}")
    print(f"--penalty-last-n 3: no repeat within 3, {len(set(window))} distinct of "
          f"{len(window)}")
    for option, value, message in [("--penalty-decay", "1.5", "penalty decay is 1.5"),
                                   ("--repeat-penalty", "0", "--repeat-penalty"),
                                   ("--frequency-penalty", "nan", "frequency penalty is nan")]:
        p = subprocess.run([exe, model, "-p", "hello", "-n", "4", option, value],
                           capture_output=True)
        err = p.stderr.decode(errors="replace")
        if p.returncode == 0 or message not in err:
            sys.exit(f"{option} {value}: exit {p.returncode}, {err!r}")
        print(f"{option} {value} refused: {err.strip()}")
elif case == "min_p":
    plain = ids(run("-p", "hello", "-n", "20", *greedy)[0])
    hot = ["--print-ids", "--temperature", "3", "--top-p", "1", "--seed", "4"]
    check("--min-p 1 at temperature 3 vs greedy",
          ids(run("-p", "hello", "-n", "20", *hot, "--min-p", "1")[0]), plain)
    loose = ids(run("-p", "hello", "-n", "20", *hot, "--min-p", "0.01")[0])
    if loose == plain:
        sys.exit(f"--min-p 0.01 at temperature 3 drew the greedy tokens: {loose}")
    print(f"--min-p 1: the greedy tokens; --min-p 0.01: {loose}")
    p = subprocess.run([exe, model, "-p", "hello", "-n", "4", "--min-p", "1.5"],
                       capture_output=True)
    err = p.stderr.decode(errors="replace")
    if p.returncode == 0 or "min_p is 1.5" not in err:
        sys.exit(f"--min-p 1.5: exit {p.returncode}, {err!r}")
    print(f"--min-p 1.5 refused: {err.strip()}")
else:
    sys.exit(f"unknown case {case}")
