"""Publish a processed dataset to the Hugging Face Hub.

    python -m jobs.publish DIR --repo_id USER/NAME [--private] [--format parquet|arrow|both]
        [--license ID] [--token TOKEN] [--dry_run FOLDER]
"""

from __future__ import annotations

import argparse
import logging

from pipeline.console import setup_logging
from pipeline.console.arguments import DefaultsFormatter, OneLineParser
from pipeline.consumers.outputs import NotAnOutput
from pipeline.consumers.publish import (
    FORMATS,
    FolderTaken,
    PublishError,
    build_upload_folder,
    check_repo_id,
    publish_streaming,
)

DEFAULT_LICENSE = "other"
_log = logging.getLogger("maskbeam.publish")


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m jobs.publish", description=__doc__.split("\n")[0],
                      formatter_class=DefaultsFormatter)
    p.add_argument("dir", help="output folder of jobs.preprocess")
    p.add_argument("--repo_id", required=True, help="USER/NAME of the dataset repository")
    p.add_argument("--private", action="store_true", help="create the repository private (default: public)")
    p.add_argument("--format", choices=FORMATS, default="parquet",
                   help="parquet (what the Hub viewer reads), arrow (the shards as written) or both (Parquet, "
                        "plus the Arrow shards under arrow/)")
    p.add_argument("--license", help="license id for the card (e.g. cc-by-4.0; default: the card says "
                   f"`license: {DEFAULT_LICENSE}`, and the log says so)")
    p.add_argument("--token", help="Hub token (default: HF_TOKEN, then the stored login)")
    p.add_argument("--dry_run", metavar="FOLDER", help="build the exact upload folder here and stop (default: "
                   "upload; a non-empty FOLDER is refused)")
    p.add_argument("--overwrite", action="store_true",
                   help="with --dry_run: replace an earlier dry run in FOLDER (default: refuse)")
    return p


def run(argv: list[str] | None = None, api=None) -> str:
    """Returns the dry-run folder or the dataset URL."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.overwrite and not args.dry_run:
        parser.error("--overwrite applies only with --dry_run")
    if args.license is None:
        args.license = DEFAULT_LICENSE
        _log.warning("no --license given: the dataset card will say `license: %s`; pass --license ID (e.g. "
                     "cc-by-4.0, or the licence of your sources) to name it", DEFAULT_LICENSE)
    try:
        check_repo_id(args.repo_id)
        if args.dry_run:
            folder = build_upload_folder(args.dir, args.dry_run, repo_id=args.repo_id, fmt=args.format,
                                         license_id=args.license, overwrite=args.overwrite)
            print(f"dry run: {len(folder.files)} files in {folder.path} (card license: {args.license})")
            return str(folder.path)
        url = publish_streaming(args.dir, args.repo_id, fmt=args.format, license_id=args.license, token=args.token,
                                private=args.private, api=api)
    except FolderTaken as error:
        parser.error(str(error))
    except (PublishError, NotAnOutput) as error:
        parser.exit(1, f"{parser.prog}: error: {error}\n")
    print(url)
    return url


def main(argv: list[str] | None = None) -> None:
    setup_logging()
    run(argv)


if __name__ == "__main__":
    main()
