#!/usr/bin/env python3
"""A tiny DCGAN-style loop: a generator and a discriminator, each with its own
Adam, and the usual prints of five scalars per step (errD, errG, D(x),
D(G(z)) before and after the update)."""
import argparse

import torch
import torch.nn as nn


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    dev = torch.device(args.device)
    nz = 16
    netG = nn.Sequential(nn.Linear(nz, 64), nn.ReLU(), nn.Linear(64, 32), nn.Tanh()).to(dev)
    netD = nn.Sequential(nn.Linear(32, 64), nn.LeakyReLU(0.2), nn.Linear(64, 1), nn.Sigmoid()).to(dev)
    criterion = nn.BCELoss()
    optimizerD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optimizerG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
    data = torch.utils.data.DataLoader(torch.randn(args.steps * args.batch_size, 32),
                                       batch_size=args.batch_size, shuffle=False)
    for epoch in range(args.epochs):
        for i, real in enumerate(data):
            real = real.to(dev)
            b = real.size(0)
            netD.zero_grad()
            label = torch.full((b,), 1.0, device=dev)
            output = netD(real).view(-1)
            errD_real = criterion(output, label)
            errD_real.backward()
            D_x = output.mean().item()
            noise = torch.randn(b, nz, device=dev)
            fake = netG(noise)
            label.fill_(0.0)
            output = netD(fake.detach()).view(-1)
            errD_fake = criterion(output, label)
            errD_fake.backward()
            D_G_z1 = output.mean().item()
            errD = errD_real + errD_fake
            optimizerD.step()
            netG.zero_grad()
            label.fill_(1.0)
            output = netD(fake).view(-1)
            errG = criterion(output, label)
            errG.backward()
            D_G_z2 = output.mean().item()
            optimizerG.step()
            print("[%d][%d] Loss_D: %.4f Loss_G: %.4f D(x): %.4f D(G(z)): %.4f / %.4f"
                  % (epoch, i, errD.item(), errG.item(), D_x, D_G_z1, D_G_z2))


if __name__ == "__main__":
    main()
