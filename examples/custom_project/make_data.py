"""Writes data/reviews.csv: generated product reviews with a sentiment and a star rating."""

import csv
import random

GOOD = ["great", "excellent", "lovely", "solid", "reliable", "superb"]
BAD = ["awful", "broken", "flimsy", "useless", "disappointing", "poor"]
THINGS = ["kettle", "lamp", "backpack", "keyboard", "chair", "blender", "tent", "camera"]
EXTRA = [" It arrived on time.", " It came in a big box.", " It was a gift.", ""]


def main(path: str = "data/reviews.csv", n: int = 240, seed: int = 0) -> None:
    rng = random.Random(seed)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["review", "sentiment", "stars"])
        for _ in range(n):
            stars = rng.randint(1, 5)
            words = GOOD if stars >= 3 else BAD
            praise = " and ".join(rng.sample(words, k=1 + abs(stars - 3)))  # more words, more stars
            text = f"This {rng.choice(THINGS)} is {praise}.{rng.choice(EXTRA)}"
            writer.writerow([text, "positive" if stars >= 3 else "negative", stars])


if __name__ == "__main__":
    main()
