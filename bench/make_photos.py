#!/usr/bin/python3
"""Writes photo-like JPEGs for the loader benchmark: OUT/<class>/<i>.jpg, WIDTHxHEIGHT, smooth
shapes and fine noise (so they compress and decode like photographs, not like flat colour).
Usage: make_photos.py OUT CLASSES PER_CLASS [WIDTH HEIGHT]. Needs python3-pil."""
import os
import random
import sys

from PIL import Image, ImageDraw, ImageFilter

out, classes, per_class = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
width, height = (int(sys.argv[4]), int(sys.argv[5])) if len(sys.argv) > 5 else (500, 375)
rng = random.Random(0)
noise = Image.effect_noise((width, height), 24).convert("RGB")
for c in range(classes):
    os.makedirs(f"{out}/class{c}", exist_ok=True)
    for i in range(per_class):
        image = Image.new("RGB", (width, height), tuple(rng.randrange(256) for _ in range(3)))
        draw = ImageDraw.Draw(image)
        for _ in range(12):
            x, y = rng.randrange(width), rng.randrange(height)
            r = rng.randrange(10, width // 3)
            draw.ellipse([x - r, y - r, x + r, y + r], fill=tuple(rng.randrange(256) for _ in range(3)))
        image = Image.blend(image.filter(ImageFilter.GaussianBlur(3)), noise, 0.15)
        image.save(f"{out}/class{c}/{i}.jpg", quality=90)
