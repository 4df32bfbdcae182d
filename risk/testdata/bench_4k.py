#!/usr/bin/env python3
"""Summarise a CSV of sales records and fetch exchange rates.

A realistic agent-written script: standard library imports, a few helpers,
a dataclass, argument parsing, file I/O in the working directory and one
HTTP call. It is not SAFE-provable (os, csv, urllib), which is the point.
"""
import argparse
import csv
import json
import logging
import os
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from urllib.request import urlopen

log = logging.getLogger("sales")
RATES_URL = "https://api.example.com/v1/rates?base=USD"


@dataclass
class Record:
    region: str
    product: str
    amount: float
    sold_at: datetime
    tags: list = field(default_factory=list)


def parse_row(row):
    """Turn one CSV row into a Record, or None when it is malformed."""
    try:
        amount = float(row["amount"].replace(",", ""))
        sold_at = datetime.strptime(row["date"], "%Y-%m-%d")
    except (KeyError, ValueError) as exc:
        log.warning("skipping row %r: %s", row, exc)
        return None
    tags = [t.strip() for t in row.get("tags", "").split(";") if t.strip()]
    return Record(row["region"].strip(), row["product"].strip(), amount, sold_at, tags)


def load(path):
    records = []
    with open(path, newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            rec = parse_row(row)
            if rec is not None:
                records.append(rec)
    log.info("loaded %d records from %s", len(records), path)
    return records


def fetch_rates(url=RATES_URL, timeout=5):
    try:
        with urlopen(url, timeout=timeout) as resp:
            return json.loads(resp.read().decode("utf-8")).get("rates", {})
    except OSError as exc:
        log.error("rates unavailable: %s", exc)
        return {}


def summarise(records, since=None):
    by_region = defaultdict(list)
    by_product = defaultdict(float)
    for rec in records:
        if since and rec.sold_at < since:
            continue
        by_region[rec.region].append(rec.amount)
        by_product[rec.product] += rec.amount
    summary = {}
    for region, amounts in sorted(by_region.items()):
        summary[region] = {
            "count": len(amounts),
            "total": round(sum(amounts), 2),
            "mean": round(statistics.mean(amounts), 2),
            "median": round(statistics.median(amounts), 2),
            "max": max(amounts),
        }
    top = sorted(by_product.items(), key=lambda kv: kv[1], reverse=True)[:5]
    return summary, top


def convert(summary, rates, currency):
    rate = rates.get(currency)
    if not rate:
        return summary
    out = {}
    for region, stats in summary.items():
        out[region] = {k: (round(v * rate, 2) if k != "count" else v) for k, v in stats.items()}
    return out


def write_report(summary, top, out_dir):
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    report = out / "report.json"
    report.write_text(json.dumps({"regions": summary, "top": top}, indent=2))
    with open(out / "top.csv", "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["product", "total"])
        for product, total in top:
            writer.writerow([product, f"{total:.2f}"])
    return report


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("csv_path")
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--currency", default=os.environ.get("REPORT_CURRENCY", "EUR"))
    parser.add_argument("--out", default="reports")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")

    records = load(args.csv_path)
    since = datetime.now() - timedelta(days=args.days)
    summary, top = summarise(records, since)
    summary = convert(summary, fetch_rates(), args.currency)
    path = write_report(summary, top, args.out)
    print(f"wrote {path} with {len(summary)} regions")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
