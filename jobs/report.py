"""A one-page report of a processed dataset: PNG plots and a self-contained HTML page.

    python -m jobs.report DIR [--html FILE] [--out_dir DIR]     (PNGs beside the page, never inside DIR)
"""

from __future__ import annotations

import os

from pipeline.console.arguments import DefaultsFormatter, OneLineParser
from pipeline.consumers.outputs import NotAnOutput, ShardMismatch
from pipeline.consumers.report import write_report
from pipeline.tokenizer.spec import TokenizerError


def run(argv: list[str] | None = None) -> dict[str, str]:
    parser = OneLineParser(prog="python -m jobs.report", description=__doc__.split("\n")[0],
                           formatter_class=DefaultsFormatter)
    parser.add_argument("dir", help="output folder of jobs.preprocess")
    parser.add_argument("--html", help="write the page here (default: DIR-report/report.html, beside the dataset)")
    parser.add_argument("--out_dir", help="folder for the PNGs (default: the folder of the --html page)")
    args = parser.parse_args(argv)
    # Never inside the dataset folder: a report there would travel with the data it describes.
    html_path = args.html or os.path.join(f"{args.dir.rstrip('/')}-report", "report.html")
    out_dir = args.out_dir or os.path.dirname(os.path.abspath(html_path))
    try:
        figures = write_report(args.dir, out_dir, html_path)
    except NotAnOutput as error:
        parser.error(str(error))
    except (ShardMismatch, TokenizerError) as error:
        parser.exit(1, f"report: {error}\n")
    print(f"report: {html_path} ({len(figures)} figures in {out_dir})")
    return figures


def main(argv: list[str] | None = None) -> None:
    run(argv)


if __name__ == "__main__":
    main()
