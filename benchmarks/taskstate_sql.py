"""A SQL agent's conversation that compaction used to spoil, and what to measure on it.

The agent answers "which month of 2023 had the highest revenue?" with a ``sql_query``
tool: it explores tables (200-row results, cut by ``table_rows`` to 20 rows and
per-column statistics), hits an error and fixes it, gets a 12-row monthly table that
holds the answer, then runs more checks before the user asks for the answer. After
compaction the prompt must still hold the 12-row table whole, both user instructions
verbatim, no fragment of the statistics, no step said twice, and no ``ctx_recall``
the model does not have. :func:`measure` reads a prepared request; ``bench_taskstate.py
--scenario`` runs it with two source trees (this module is loaded by path, so the
baseline tree need not have it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

LEDGER_MARK = "[ctxpolicy progress ledger]"
TASK = (
    "Which month of 2023 had the highest revenue in shop.db? Answer with one line: "
    "`best month: YYYY-MM`. Count only orders with status = 'completed'."
)
LATER = "Note: revenue means amount minus refunds, in EUR."
FINAL = "So, which month? Reply in the required format."
MONTHLY = [(f"2023-{m:02d}", 41_000 + (m * 7919) % 23_000) for m in range(1, 13)]
ANSWER_TABLE = "month,revenue_eur\n" + "\n".join(f"{m},{v}" for m, v in MONTHLY)


def _rows(n: int, cols: Sequence[str], seed: int) -> str:
    """A CSV result of ``n`` rows (deterministic values)."""
    lines = [",".join(cols)]
    for i in range(n):
        vals = []
        for j, c in enumerate(cols):
            k = (i * 31 + j * 17 + seed * 7) % 997
            if c.endswith("id"):
                vals.append(str(1000 + i))
            elif "date" in c or c == "created_at":
                vals.append(f"2023-{1 + k % 12:02d}-{1 + k % 28:02d}")
            elif c in ("status",):
                vals.append(("completed", "refunded", "pending")[k % 3])
            elif c in ("amount", "price", "total", "refund_eur"):
                vals.append(f"{k * 1.37:.2f}")
            else:
                vals.append(f"{c}_{k}")
        lines.append(",".join(vals))
    return "\n".join(lines)


def conversation() -> list[dict[str, Any]]:
    """The SQL agent's conversation (OpenAI chat messages), ending with the user's
    last question."""
    system = (
        "You are a data analyst. Query the SQLite database shop.db with the sql_query tool "
        "and answer the user's question exactly as asked."
    )
    msgs: list[dict[str, Any]] = [{"role": "system", "content": system}]
    msgs.append({"role": "user", "content": TASK})
    n = 0

    def step(text: str, sql: str, result: str) -> None:
        nonlocal n
        n += 1
        cid = f"call_{n:03d}"
        fn = {"name": "sql_query", "arguments": json.dumps({"sql": sql})}
        call = {"id": cid, "type": "function", "function": fn}
        msgs.append({"role": "assistant", "content": text, "tool_calls": [call]})
        msgs.append({"role": "tool", "tool_call_id": cid, "content": result})

    step(
        "Let me list the tables.",
        "SELECT name FROM sqlite_master WHERE type='table'",
        "name\norders\ncustomers\nproducts\nrefunds",
    )
    step(
        "Now the columns of orders.",
        "PRAGMA table_info(orders)",
        "cid,name,type\n0,order_id,INTEGER\n1,customer_id,INTEGER\n2,created_at,TEXT\n"
        "3,status,TEXT\n4,amount,REAL",
    )
    cols = {
        "orders": ("order_id", "customer_id", "created_at", "status", "amount"),
        "customers": ("customer_id", "name", "country", "segment"),
        "products": ("product_id", "name", "category", "price"),
        "refunds": ("refund_id", "order_id", "created_at", "refund_eur"),
    }
    for seed, (table, cs) in enumerate(cols.items()):
        sample = f"SELECT * FROM {table} LIMIT 200"
        step(f"Let me look at sample rows of {table}.", sample, _rows(200, cs, seed))
    step(
        "Monthly revenue of completed orders.",
        "SELECT strftime('%Y-%m', order_date) AS month, SUM(amount) FROM orders "
        "WHERE status = 'completed' GROUP BY 1",
        "Error: no such column: order_date",
    )
    msgs.append({"role": "user", "content": LATER})
    step(
        "The date column is created_at; refunds are subtracted as the user said.",
        "SELECT strftime('%Y-%m', o.created_at) AS month, SUM(o.amount) - "
        "COALESCE(SUM(r.refund_eur), 0) AS revenue_eur FROM orders o LEFT JOIN refunds r "
        "ON r.order_id = o.order_id WHERE o.status = 'completed' AND o.created_at LIKE "
        "'2023-%' GROUP BY 1 ORDER BY 1",
        ANSWER_TABLE,
    )
    for seed in range(6):
        step(
            f"Let me double-check the data behind month {seed + 1}.",
            f"SELECT * FROM orders WHERE created_at LIKE '2023-{seed + 1:02d}-%' LIMIT 200",
            _rows(200, cols["orders"], 10 + seed),
        )
    msgs.append({"role": "user", "content": FINAL})
    return msgs


#: What a ledger or summary must never hold: a piece of a column's statistics.
FRAGMENT = re.compile(r"inct=|nulls=|\bmin=\S* max=|^- \d+ (?:min|max)\b", re.MULTILINE)


def measure(request: Sequence[Mapping[str, Any]], count: Callable[[str], int]) -> dict[str, Any]:
    """What the prompt holds after compaction: the ledger's and summaries' share of its
    tokens, whether the answer table and the user's instructions are there whole,
    fragments of statistics, the recall tool named, the lines said twice."""
    texts = [c if isinstance(c := m.get("content"), str) else "" for m in request]
    total = sum(count(t) for t in texts if t)
    originals = {m["content"] for m in conversation() if isinstance(m.get("content"), str)}
    ledger = next((t for t in texts if t.startswith(LEDGER_MARK)), "")
    summaries = [
        t
        for m, t in zip(request, texts, strict=True)
        if m.get("role") == "user" and t and t not in originals
    ]
    own = "\n".join([ledger, *summaries])
    whole = "\n".join(texts)
    summary_lines = {" ".join(s.split()) for x in summaries for s in x.splitlines()}
    dup = [
        line
        for line in ledger.splitlines()
        if len(line.strip()) >= 6
        and not line.rstrip().endswith(":")
        and " ".join(line.split()) in summary_lines
    ]
    mine = count(ledger) + sum(count(s) for s in summaries)
    return {
        "prompt_tokens": total,
        "ledger_summary_tokens": mine,
        "share": mine / total if total else 0.0,
        "answer_table_whole": ANSWER_TABLE in whole,
        "instructions_verbatim": all(t in whole for t in (TASK, LATER, FINAL)),
        "fragments": len(FRAGMENT.findall(own)),
        "names_recall": "ctx_recall" in own,
        "duplicated_lines": len(dup),
    }


def run(policy: Any, *, tools: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """Replay :func:`conversation` as an agent loop would (``add_tool_result`` for every
    result, ``prepare`` before every model call) and :func:`measure` the last request."""
    from ctxpolicy import Session
    from ctxpolicy.state.memory import MemoryStateStore

    # a fixed conversation id (it shows in references: the same bytes each run), and
    # state in memory (each run starts fresh)
    session = Session(policy, conv_id="sql-agent", state_store=MemoryStateStore())
    convo: list[dict[str, Any]] = []
    calls: dict[str, Any] = {}
    out: list[dict[str, Any]] = []
    for m in conversation():
        if m["role"] == "assistant":
            out = session.prepare(convo, tools=tools)
            for tc in m.get("tool_calls") or ():
                calls[tc["id"]] = tc
        if m["role"] == "tool":
            text = session.add_tool_result(calls[m["tool_call_id"]], m["content"])
            m = {**m, "content": text}
        convo.append(m)
    out = session.prepare(convo, tools=tools)
    return measure(out, session.counter.count_text) | {"request": out}
