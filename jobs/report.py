"""A one-page report of a processed dataset: PNG plots and a self-contained HTML page.

    python -m jobs.report DIR [--html FILE] [--out_dir DIR]
"""

from __future__ import annotations

import argparse
import os

from pipeline.consumers.outputs import NotAnOutput
from pipeline.consumers.report import write_report


def run(argv: list[str] | None = None) -> dict[str, str]:
    parser = argparse.ArgumentParser(prog="python -m jobs.report", description=__doc__.split("\n")[0])
    parser.add_argument("dir", help="output folder of jobs.preprocess")
    parser.add_argument("--html", help="write the page here (default: DIR/report/report.html)")
    parser.add_argument("--out_dir", help="folder for the PNGs (default: DIR/report)")
    args = parser.parse_args(argv)
    out_dir = args.out_dir or os.path.join(args.dir, "report")
    html_path = args.html or os.path.join(out_dir, "report.html")
    try:
        figures = write_report(args.dir, out_dir, html_path)
    except NotAnOutput as error:
        parser.error(str(error))
    print(f"report: {html_path} ({len(figures)} figures in {out_dir})")
    return figures


def main() -> None:
    run()


if __name__ == "__main__":
    main()
