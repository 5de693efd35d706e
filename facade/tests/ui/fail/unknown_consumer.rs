struct Notifier;

#[evc::consumer("worker.notifications.iu")]
impl Notifier {
    async fn on_iu_born(&self) {}
}

fn main() {}
