"""compat export: resolve as compat resolve does, then write the set in a FORMAT (formats.py, one module per format),
or check a hand-written PyTorchJob/TrainJob manifest or Dockerfile (--validate FILE: export/service.py judges it).
Writes to stdout."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Optional

from ...errors import EXIT_OK, EXIT_PROBLEMS, UsageError, shown
from .._options import output, output_options, source_options, sources, target, target_options, wanted, wanted_options
from .._say import say_conflict

if TYPE_CHECKING:
    from ...matrix.model import Matrix
    from ...options import ExportArgs

DESCRIPTION = ("Resolve as compat resolve does, then write the set in FORMAT to standard output: pytorchjob (a "
               "Kubeflow PyTorchJob, --trainer-v2 a TrainJob, running the training command after -- under "
               "torchrun), sbatch (a Slurm batch script: compat env, the live preflight under srun, then the "
               "training command after -- under srun), skypilot (a SkyPilot task: setup installs the set with compat install, run "
               "does compat env, the live preflight, then torchrun with the CPU ranks), ray (a Ray Train driver: the live preflight as one Ray task per node, then the "
               "training command on every Ray Train worker, gloo with a bounded timeout), dockerfile (an image that installs the set with compat "
               "install and checks it), requirements, constraints, pip-command (what compat install --print "
               "printed), pylock (a PEP 751 pylock.toml of the set). --validate FILE checks a PyTorchJob/TrainJob "
               "manifest or a Dockerfile against the rules the generated ones follow, for the "
               "transformers/accelerate/torch of --python's environment or of the resolved set, after what the API "
               "server would do with it (the CRD's fields, types and CEL rules; a TrainJob against the Trainer "
               "release of --trainer-version or --crd), on the pods the cluster would run. Exit 0 written "
               "(--validate: no failure), 1 no consistent set, a training command that cannot work with the set, or"
               " (--validate) failures; 2 usage error or an unreadable file.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from .formats import FORMATS

    names = ",".join(FORMATS)
    parser.usage = (f"compat export {{{names}}} [REQUIREMENT ...] [resolve options] [format options] [-- TRAINING COMMAND ...]\n"
                    "       compat export --validate FILE [--show-pods] [--trainer-version V | --crd FILE] [--json] [resolve options | --python PATH]")
    parser.command_after_dashes = True
    parser.add_argument("format", nargs="?", metavar="FORMAT", help="one of " + ", ".join(FORMATS))
    wanted_options(parser)
    target_options(parser, exclusive=True,
                   python="resolve for this interpreter; with --validate: take the versions from its installed set (default: $COMPAT_PYTHON, "
                   "else the running one's Python)",
                   python_version="resolve for this CPython version (default: the running one)",
                   platform="PEP 425 platform tag (default: the target interpreter's)")
    source_options(parser, verification=False)
    parser.add_argument("--torch-from-pypi", action="store_true", help="take torch from PyPI instead of the PyTorch CPU index")
    parser.add_argument("--require-hashes", action="store_true", help="requirements: refused (as compat install --print), since the "
                        "dependencies' hashes are known only to compat download")
    parser.add_argument("--validate", metavar="FILE", help="check this PyTorchJob/TrainJob manifest (YAML, several documents allowed) or "
                        "Dockerfile (a FROM line) and print findings as compat doctor does; no FORMAT")
    output_options(parser, json_help="with --validate: the findings as JSON (compatmatrix/schemas/export-validate-v1.json)")
    for choice in FORMATS.values():
        choice.add_arguments(parser)
    k8s = parser.add_argument_group("trainjob (with pytorchjob --trainer-v2, and with --validate)")
    k8s.add_argument("--trainer-version", metavar="V", help="the Kubeflow Trainer release of the cluster: v2.0, v2.1, v2.2, v2.3 "
                     "(default: the newest with its CRD) or v2.4 (known from its release notes only: v2.3's TrainJob API, said in a note, "
                     "and the notes' rules; with --crd, the CRD's schema); its TrainJob fields, override mechanism and runtime part names are used")
    k8s.add_argument("--crd", metavar="FILE", help="the cluster's TrainJob CRD (kubectl get crd trainjobs.trainer.kubeflow.org -o yaml) "
                     "instead of --trainer-version (or with --trainer-version v2.4); a release compat does not know is judged by its schema")
    k8s.add_argument("--show-pods", action="store_true", help="with --validate: also print the pods the cluster would run for "
                     "the manifest (YAML); they are judged either way")
    parser.set_defaults(format_defaults={action.dest: action.default for action in parser._actions})


def build(ns: argparse.Namespace) -> ExportArgs:
    from ...options import DockerArgs, ExportArgs, JobArgs, RayArgs, SlurmArgs, Wanted

    form, requirements = _format(ns)
    _refuse_other_formats_options(ns, form)
    _refuse_misplaced(ns, form)
    job = JobArgs(ns.nnodes, ns.nproc_per_node, ns.image, ns.cpu, ns.memory, ns.name, ns.namespace, ns.shm_size, ns.threads_per_core,
                  not ns.no_preflight, ns.trainer_v2, tuple(ns.training_command or ()), ns.watch, _watch_claim(ns))
    docker = DockerArgs(ns.base, ns.ranks_per_node, ns.wheelhouse)
    asked = wanted(ns)
    return ExportArgs(output(ns), target(ns), Wanted(tuple(requirements), asked.files, asked.profile, asked.with_), sources(ns), form,
                      ns.validate, job, docker, ns.trainer_version, ns.crd, ns.show_pods, SlurmArgs(ns.time, ns.partition),
                      RayArgs(ns.cpus_per_node, ns.gloo_timeout, not ns.no_runtime_pip, ns.preflight_timeout))


def _watch_claim(ns: argparse.Namespace) -> Optional[str]:
    """--watch-claim CLAIM: with --watch, across pods; a PersistentVolumeClaim's name (a DNS-1123 label here)."""
    claim = ns.watch_claim
    if claim is None:
        return None
    if not ns.watch:
        raise UsageError("--watch-claim holds the run folder of --watch.", "Add --watch, or drop --watch-claim.")
    if ns.nnodes == 1:
        raise UsageError("--watch-claim shares the run folder between pods, and the job has one (--nnodes 1): its watcher sees every rank already.",
                         "Drop --watch-claim.")
    from ...values import dns1123_ok

    if not dns1123_ok(claim):
        raise UsageError(f"--watch-claim '{shown(claim)}' is not a claim's name (lower case letters, digits and '-', at most 63).",
                         "Pass the name of a ReadWriteMany PersistentVolumeClaim of the job's namespace (kubectl get pvc).")
    return claim


def _format(ns: argparse.Namespace) -> tuple[Optional[str], list[str]]:
    """(FORMAT, or None with --validate; the REQUIREMENTs)."""
    from .formats import FORMATS

    requirements = list(ns.requirements)
    form = ns.format
    if ns.validate is not None and form is not None and form not in FORMATS:
        requirements.insert(0, form)  # the first REQUIREMENT, taken for FORMAT by argparse
        form = None
    if ns.validate is not None and form is not None:
        raise UsageError(f"--validate checks a file; it takes no FORMAT ('{shown(form)}').", "Run compat export --validate FILE, or compat export FORMAT.")
    if ns.validate is None and form is None:
        raise UsageError("compat export needs a FORMAT or --validate FILE.", f"Name one of {', '.join(FORMATS)}, e.g. compat export requirements.")
    if form is not None and form not in FORMATS:
        raise UsageError(f"'{shown(form)}' is not an export format.", f"Name one of {', '.join(FORMATS)}.")
    if ns.json and ns.validate is None:
        raise UsageError("--json goes with --validate (the formats are their own output).", "Drop --json, or check a file with --validate FILE.")
    return form, requirements


def _refuse_other_formats_options(ns: argparse.Namespace, form: Optional[str]) -> None:
    """An option of another format (or, with --validate, of any format) given a value: refused, naming its format."""
    from .formats import FORMATS

    taken = FORMATS[form].options if form is not None else ()
    for owner in FORMATS.values():
        given = [name for name in owner.options if name not in taken and getattr(ns, name) != ns.format_defaults[name]]
        if owner.name != form and given:
            flag = "--" + given[0].replace("_", "-")
            raise UsageError(f"{flag} goes with compat export {owner.name}" + (f", not {form}." if form else ", not --validate."),
                             f"Drop {flag}, or export {owner.name}.")


def _refuse_misplaced(ns: argparse.Namespace, form: Optional[str]) -> None:
    """The training command, the Trainer release and --show-pods where they do not apply."""
    from .formats import FORMATS

    if ns.training_command is not None and not (form is not None and FORMATS[form].takes_command):
        names = [name for name, choice in FORMATS.items() if choice.takes_command]
        runners = ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else names[0]
        raise UsageError(f"Only compat export {runners} take a training command after --.", "Drop the words after --.")
    release_flag = "--crd" if ns.crd is not None else "--trainer-version" if ns.trainer_version is not None else None
    if ns.crd is not None and ns.trainer_version is not None and not _notes_only(ns.trainer_version):
        raise UsageError("--crd and --trainer-version both name the Trainer release.",
                         "Pass one of them (--crd when your cluster's release is newer than compat knows; both only for a release known from its "
                         "notes, such as v2.4).")
    if release_flag and ns.validate is None and not (form == "pytorchjob" and ns.trainer_v2):
        raise UsageError(f"{release_flag} goes with compat export pytorchjob --trainer-v2 or with --validate.", f"Add --trainer-v2, or drop {release_flag}.")
    if ns.show_pods and ns.validate is None:
        raise UsageError("--show-pods goes with --validate FILE.", "Run compat export --validate FILE --show-pods.")


def _notes_only(version: str) -> bool:
    from ...export.releases import notes_only  # only here: the release data loads where a TrainJob is asked for (tests/test_startup.py)

    return notes_only(version)


def run(args: ExportArgs) -> int:
    from ...planning import NoSet, load, plan_for, target_of
    from .formats import FORMATS

    matrix = load(args.output.matrix)
    if args.validate is not None:
        return _validate(args, matrix)
    python, platform = target_of(args.target)
    try:
        planned = plan_for(matrix, args.wanted, args.sources, python, platform)
    except NoSet as no_set:
        return say_conflict(args.output.no_color, no_set)
    assert args.format is not None
    return FORMATS[args.format].write(planned, args)


def _validate(args: ExportArgs, matrix: Matrix) -> int:
    """compat export --validate FILE: the file read and judged; the versions of --python's environment, else the resolved set's."""
    from ...export import service
    from ...planning import NoSet, plan_for, target_of
    from ...render import emit
    from ...render.json import validate_json
    from ...render.text import render_findings

    assert args.validate is not None
    text = service.read_file(args.validate)
    versions: dict = {}
    origin = ""
    if not service.is_dockerfile(text):
        interpreter = args.target.interpreter
        if interpreter:
            from ...environment.snapshot import take_snapshot

            snapshot = take_snapshot(interpreter)
            versions = service.installed_versions(snapshot)
            origin = f"installed in {snapshot.executable}"
        else:
            python, platform = target_of(args.target)
            try:
                planned = plan_for(matrix, args.wanted, args.sources, python, platform)
            except NoSet as no_set:
                return say_conflict(args.output.no_color, no_set)
            versions = service.resolved_versions(planned.outcome)
            request = planned.outcome.request
            origin = f"the set compat resolves for Python {request.python.label}" + (f", profile {request.profile}" if request.profile else "")
    release = service.trainer_release(args.trainer_version, args.crd) if (args.trainer_version or args.crd) else None
    done = service.validate_text(args.validate, text, matrix, versions, release)
    shown_versions = {name: str(v) if v is not None else None for name, v in versions.items() if name != service.CCL_KEY}
    said = ", ".join(f"{name} {v}" for name, v in shown_versions.items() if v) or "no versions"
    against = f" · {done.release.label} ({done.release.cited})" if done.release is not None else ""
    header = f"compat export --validate {args.validate} ({done.kind}) · {said}" + (f" ({origin})" if origin else "") + against

    def document() -> dict:
        data = validate_json(args.validate or "", done.kind, done.documents, shown_versions, origin, done.findings)
        if done.release is not None:
            data["trainer"] = {"version": done.release.version, "tag": done.release.tag, "commit": done.release.commit, "note": done.release.note}
        if args.show_pods:
            data["pods"] = [{"role": role, "count": count, "pod": pod} for role, count, pod in done.pods]
        return data

    def text_out(console) -> None:
        if args.show_pods and done.pods:
            from ...redact import redact_document
            from ...render.manifest import manifest_text

            for role, count, pod in done.pods:  # an index URL in the pods' env masked, as --json and every other output has it
                sys.stdout.write(manifest_text(redact_document(pod), [f"{count} pod(s): {role}"]) + "---\n")
            sys.stdout.flush()
        render_findings(console, header, done.findings, False)

    emit(args.output.json, args.output.no_color, document, text_out)
    return EXIT_PROBLEMS if any(f.status.value == "fail" for f in done.findings) else EXIT_OK
