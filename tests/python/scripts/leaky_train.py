#!/usr/bin/env python3
"""A small PyTorch training run (cpu by default) reported through devgate_probe.

A tiny MLP on seeded random data, EPOCHS epochs of STEPS training steps and a
short validation pass each (run with autograd on, as programs often do). Every
epoch ends with the probe's allocator discipline and an epoch_end watermark.

--keep-losses reproduces the classic leak: each loss TENSOR (not loss.item(),
not .detach()) goes into a list kept across epochs, so every step's autograd
graph and the activations it saved stay alive, and the footprint climbs epoch
after epoch although the cache is emptied at every boundary. Without the flag
the losses are kept as floats and the footprint stays flat.

Events go where devgate_probe sends them (DEVGATE_EVENTS_FD or
DEVGATE_EVENTS_FILE); --print shows the footprint per epoch on stdout. Run with
clients/python on PYTHONPATH (or devgate_probe installed), e.g.
    PYTHONPATH=clients/python DEVGATE_EVENTS_FILE=ev.jsonl python3 tests/python/scripts/leaky_train.py --keep-losses
Measured here (torch 1.13, CPU): epoch-10 footprint about +87% over epoch 0 with
--keep-losses, within +-2% without.
"""

import argparse
import sys

import torch

import devgate_probe as dg


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep-losses", action="store_true", help="keep every loss tensor with its graph (the leak)")
    ap.add_argument("--epochs", type=int, default=11)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="torch device: cpu, cuda, cuda:N or mps")
    ap.add_argument("--print", action="store_true", help="print each epoch's footprint")
    args = ap.parse_args(argv)

    torch.set_num_threads(max(1, args.threads))
    dg.seed_everything(args.seed)  # its worker_init_fn is not needed: no DataLoader here
    inputs, classes, val_batches, vb = 128, 10, 16, 4 * args.batch

    probe = dg.Probe(label="leaky_train" + (" --keep-losses" if args.keep_losses else ""))
    probe.run_start(args.device, args.batch, bucket={"data": "random normal, seeded", "resolution": inputs,
                                               "augment": "none", "batch": args.batch})
    probe.gate(args.device)
    dev = torch.device(args.device)

    w = args.width
    model = torch.nn.Sequential(
        torch.nn.Linear(inputs, w), torch.nn.ReLU(),
        torch.nn.Linear(w, w), torch.nn.ReLU(),
        torch.nn.Linear(w, w), torch.nn.ReLU(),
        torch.nn.Linear(w, classes)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    gen = torch.Generator().manual_seed(args.seed)
    data = torch.randn(args.steps * args.batch, inputs, generator=gen)
    labels = torch.randint(0, classes, (args.steps * args.batch,), generator=gen)
    val_x = torch.randn(val_batches * vb, inputs, generator=gen)
    val_y = torch.randint(0, classes, (val_batches * vb,), generator=gen)
    data, labels, val_x, val_y = (t.to(dev) for t in (data, labels, val_x, val_y))

    history = []  # every loss of the run: floats, or tensors with --keep-losses
    for epoch in range(args.epochs):
        with probe.epoch(epoch, validation=True) as ep:
            probe.phase("train", epoch)
            model.train()
            batches = (data[i * args.batch:(i + 1) * args.batch] for i in range(args.steps))
            for i, x in enumerate(probe.timed_loader(batches)):
                y = labels[i * args.batch:(i + 1) * args.batch]
                with probe.step() as st:
                    loss = torch.nn.functional.cross_entropy(model(x), y)
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                    st.loss = loss.item()
                history.append(loss if args.keep_losses else st.loss)
            probe.phase("validation", epoch)
            model.eval()
            for i in range(val_batches):
                # Validation without torch.no_grad(): harmless while the loss is
                # dropped, a leak of the whole graph once the tensor is kept.
                x = val_x[i * vb:(i + 1) * vb]
                y = val_y[i * vb:(i + 1) * vb]
                vloss = torch.nn.functional.cross_entropy(model(x), y)
                history.append(vloss if args.keep_losses else vloss.item())
            del loss, vloss
        if args.print:
            print("epoch %d footprint %.1f MB" % (epoch, ep.record["footprint"] / 1e6), flush=True)
    probe.run_end("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
