"""Side-by-side comparisons with peer toolkits (JoeyNMT, OpenNMT-py): export our exact data splits,
tokenizers and an equivalent configuration, so a peer trains on what our model trains on."""
