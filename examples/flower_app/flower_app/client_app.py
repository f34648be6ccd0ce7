"""flower-app's ClientApp: the user's LightningModule and Trainer on this node's partition."""
from flwr.app import Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from torch.utils.data import DataLoader

from fl_lightning.deploy.client_helper import answer_join, fit_reply  # + FL
from flower_app.task import BATCH, LitDigits, load_partition, test_set, trainer

app = ClientApp()
app.query()(answer_join)  # + FL: the strategy asks each node which partition it holds


@app.train()
def train(msg: Message, context: Context) -> Message:
    shard = load_partition(context.node_config["partition-id"], context.node_config["num-partitions"])
    return fit_reply(msg, context, LitDigits(), trainer(),  # + FL: the job in msg, trained by this Trainer
                     lambda job: DataLoader(shard, batch_size=BATCH, sampler=job.sampler(shard)))  # + FL


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    model = LitDigits()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    data = test_set()
    (metrics,) = trainer().validate(model, DataLoader(data, batch_size=100), verbose=False)
    return Message(RecordDict({"metrics": MetricRecord({"eval_acc": metrics["val_acc"], "num-examples": len(data)})}),
                   reply_to=msg)
