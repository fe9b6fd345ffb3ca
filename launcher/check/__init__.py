"""Checking: reading a vLLM log, and holding what it states against the plan, bucket by bucket.

The lines themselves are vLLM's and live with it (`launcher.vllm.logs`: one `Pattern` per kind of line). Here they
are read: `framer.py` cleans a line and joins a record wrapped over lines; `parser.py`'s `LogParser` starts a new
boot at each boot banner, or where a log without banners restarts (`restarts.py`), and sends each pattern's match
to a small extractor of one fact (`extract.py` for the figures, `failures.py` and `environment.py` for what went
wrong), gathering them in `facts.LogFacts`; `masks.py` says which patterns a text can match from its keywords, and
which lines are vLLM's. `LogParser.feed(line)` takes one line at a time (the live watcher of `serve`);
`parser.parse_text` and `stream.parse_stream` read a whole log and state the same facts. `parse_stream` reads any
file in constant memory, handing the parser only the lines that can matter, found with bytes searches over large
chunks, and only the last boots of a log that restarted. What the parser reads of a log:

- a line's first LINE_CAP characters (64 KiB);
- a record that goes on over several lines (a forum's or a terminal's wrap, vLLM's prefix repeated on every line
  of a multi-line message) as one, as well as each line;
- the last boot, when the log holds several: a boot begins at a boot banner, or, without banners, where the first
  two statements of the boot come again, in order;
- once the API server is up, only the lines that can say something new: a new boot, a runtime failure, the
  engine's periodic statistics (`throughput.throughput_samples` reads those of a log).

A file is a vLLM log when a line of it is one only vLLM prints, or starts with vLLM's logger header (a level, the
date and time, the file and line: `INFO 12-13 19:54:18 worker.py:243] ` before 0.6.5, `[worker.py:243]` since),
behind process tags or not.

`compare.py` is `vlaunch check`: the facts of a log against the plan of the same launch, the gap by bucket.
"""
