"""A small real training script of ours that logs like other projects' tools: the tests run it as a runner.

It trains dlbench's PyTorch ResNet-50 v1.5 at a tiny image size on a learnable synthetic task (the label is the
brightest image quadrant) with SGD, as one process or under torchrun (DDP over gloo), and logs through
    --log-format mllog     the real mlperf_logging.mllog package (MLPerf's :::MLLOG lines); evaluates on a
                           held-out set every --eval-every steps and stops at --target accuracy or --steps
    --log-format dllogger  DLLogger's text backend lines, as NVIDIA's ConvNets scripts print them
    --log-format tf_cnn    tf_cnn_benchmarks' step and summary lines
Only rank 0 logs. It knows nothing of dlbench's harness: what it prints is all the study learns.
"""

from __future__ import annotations

import argparse
import datetime
import os
import time

import torch
import torch.distributed as dist
from torch import nn

from dlbench.harness.backends.pytorch.resnet import ResNet50

CLASSES = 4


def batch(size: int, image: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Noise images whose label is the quadrant made brightest: learnable, and far above chance once learned."""
    x = torch.randn(size, 3, image, image, generator=generator) * 0.5
    y = torch.randint(0, CLASSES, (size,), generator=generator)
    half = image // 2
    for i, label in enumerate(y.tolist()):
        r, c = divmod(label, 2)
        x[i, :, r * half : (r + 1) * half, c * half : (c + 1) * half] += 1.5
    return x, y


def dll(step: str, **values: str) -> None:
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S.%f")
    print(f"DLL {stamp} - {step} " + " ".join(f"{k} : {v}" for k, v in values.items()), flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--log-format", choices=("mllog", "dllogger", "tf_cnn"), required=True)
    p.add_argument("--batch-size", type=int, default=4, help="per process")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=1, help="tf_cnn: steps before its timing starts")
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--eval-every", type=int, default=5)
    p.add_argument("--target", type=float, default=0.6)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()

    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo")
    torch.manual_seed(args.seed)
    model: nn.Module = ResNet50(num_classes=CLASSES)
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    data = torch.Generator().manual_seed(args.seed * 1000 + rank)
    held_out = batch(64, args.image_size, torch.Generator().manual_seed(999_999))
    log = rank == 0

    mllog = None
    if args.log_format == "mllog":
        from mlperf_logging import mllog as mllog_module

        mllog = mllog_module.get_mllogger()
        c = mllog_module.constants
        if log:
            mllog.event(key=c.SUBMISSION_BENCHMARK, value="resnet")
            mllog.event(key=c.SUBMISSION_ORG, value="dlbench")
            mllog.event(key=c.SUBMISSION_PLATFORM, value=f"cpu-{world}")
            mllog.event(key=c.SUBMISSION_DIVISION, value="open")
            mllog.event(key=c.SUBMISSION_STATUS, value="onprem")
            mllog.event(key=c.GLOBAL_BATCH_SIZE, value=args.batch_size * world)
            mllog.event(key=c.OPT_NAME, value="sgd")
            mllog.event(key=c.OPT_BASE_LR, value=args.lr)
            mllog.start(key=c.INIT_START)
            mllog.end(key=c.INIT_STOP)
            mllog.start(key=c.RUN_START)
    if args.log_format == "tf_cnn" and log:
        print(
            f"Model:       resnet50\nBatch size:  {args.batch_size * world} global\n"
            f"             {args.batch_size} per device\nNum GPUs:    {world}\n"
            f"Variable update: {'replicated' if world > 1 else 'parameter_server'}\n",
            flush=True,
        )
        print("Step\tImg/sec\ttotal_loss", flush=True)

    ips: list[float] = []
    status, accuracy, started = "aborted", 0.0, time.perf_counter()
    for step in range(1, args.steps + 1):
        t0 = time.perf_counter()
        x, y = batch(args.batch_size, args.image_size, data)
        model.train()
        loss = loss_fn(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        rate = args.batch_size * world / (time.perf_counter() - t0)
        ips.append(rate)
        if not log:
            pass
        elif args.log_format == "dllogger":
            dll(
                f"Epoch: 0 Iteration: {step}",
                **{"train.loss": f"{loss.item():.5f}", "train.total_ips": f"{rate:.2f} images/s"},
            )
        elif args.log_format == "tf_cnn" and step > args.warmup:
            print(f"{step - args.warmup}\timages/sec: {rate:.1f} +/- 0.0 (jitter = 0.0)\t{loss.item():.3f}", flush=True)
        if mllog is not None and step % args.eval_every == 0:
            model.eval()
            with torch.no_grad():
                accuracy = (model(held_out[0]).argmax(1) == held_out[1]).float().mean().item()
            if log:
                mllog.event(key=mllog_module.constants.EVAL_ACCURACY, value=accuracy, metadata={"epoch_num": step})
            if accuracy >= args.target:
                status = "success"
                break
    if log and args.log_format == "dllogger":
        dll("Summary:", **{"train.total_ips": f"{sum(ips) / len(ips):.2f} images/s"})
    if log and args.log_format == "tf_cnn":
        timed = ips[args.warmup :] or ips
        print("-" * 64 + f"\ntotal images/sec: {sum(timed) / len(timed):.2f}\n" + "-" * 64, flush=True)
    if log and mllog is not None:
        mllog.end(key=mllog_module.constants.RUN_STOP, metadata={"status": status})
        print(f"reached {accuracy:.3f} in {time.perf_counter() - started:.1f} s", flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
