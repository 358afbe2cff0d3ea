"""Small parts several test modules share: a hook that kills a run at a step, a byte-level BPE for tiny decoders."""
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from istar_plugin.hooks import Hook


class CrashAt(Hook):
    """Simulates a killed job: raises once the given optimizer step is done."""

    def __init__(self, step):
        self.step = step

    def on_step_end(self, trainer, step, stats):
        if step == self.step:
            raise KeyboardInterrupt(f"simulated kill at step {step}")


def byte_level_bpe(shared_data, special: str, vocab_size: int = 400) -> Tokenizer:
    """A byte-level BPE trained on 2,000 SST-2 training sentences, with one special token (end of text)."""
    sentences = [line.split("\t")[0] for line in (shared_data / "sst2" / "train.tsv").read_text().splitlines()[1:2001]]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(sentences, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[special], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return bpe
