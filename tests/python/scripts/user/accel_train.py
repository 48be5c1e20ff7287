#!/usr/bin/env python3
"""A DCGAN-style training script in the manner of pytorch/examples' dcgan:
the device is not an argument but a switch, --accel, that moves the work to
the machine's accelerator when there is one; --batchSize, --niter, --workers
as that script names them; a generator and a discriminator, each with its own
Adam; a line printed every step."""
import argparse
import random

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def pick_device(accel):
    if not accel:
        return torch.device("cpu")
    acc = getattr(torch, "accelerator", None)  # torch >= 2.6
    if acc is not None and acc.is_available():
        return acc.current_accelerator()
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=2, help="number of data loading workers")
    parser.add_argument("--batchSize", type=int, default=64, help="input batch size")
    parser.add_argument("--niter", type=int, default=2, help="number of epochs to train for")
    parser.add_argument("--nz", type=int, default=16, help="size of the latent z vector")
    parser.add_argument("--lr", type=float, default=0.0002, help="learning rate")
    parser.add_argument("--accel", action="store_true", default=False, help="enables accelerator")
    parser.add_argument("--manualSeed", type=int, default=1, help="manual seed")
    opt = parser.parse_args()
    random.seed(opt.manualSeed)
    torch.manual_seed(opt.manualSeed)
    torch.set_num_threads(1)
    device = pick_device(opt.accel)
    print("using device", device, flush=True)
    data = TensorDataset(torch.randn(512, 64), torch.zeros(512))
    loader = DataLoader(data, batch_size=opt.batchSize, shuffle=True, num_workers=opt.workers)
    netG = nn.Sequential(nn.Linear(opt.nz, 128), nn.ReLU(), nn.Linear(128, 64), nn.Tanh()).to(device)
    netD = nn.Sequential(nn.Linear(64, 128), nn.LeakyReLU(0.2), nn.Linear(128, 1)).to(device)
    criterion = nn.BCEWithLogitsLoss()
    optimizerD = torch.optim.Adam(netD.parameters(), lr=opt.lr, betas=(0.5, 0.999))
    optimizerG = torch.optim.Adam(netG.parameters(), lr=opt.lr, betas=(0.5, 0.999))
    for epoch in range(opt.niter):
        for i, (real, _) in enumerate(loader):
            real = real.to(device)
            b = real.size(0)
            netD.zero_grad()
            errD_real = criterion(netD(real).view(-1), torch.ones(b, device=device))
            fake = netG(torch.randn(b, opt.nz, device=device))
            errD_fake = criterion(netD(fake.detach()).view(-1), torch.zeros(b, device=device))
            errD = errD_real + errD_fake
            errD.backward()
            optimizerD.step()
            netG.zero_grad()
            errG = criterion(netD(fake).view(-1), torch.ones(b, device=device))
            errG.backward()
            optimizerG.step()
            print("[%d/%d][%d/%d] Loss_D: %.4f Loss_G: %.4f"
                  % (epoch, opt.niter, i, len(loader), errD.item(), errG.item()), flush=True)


if __name__ == "__main__":
    main()
