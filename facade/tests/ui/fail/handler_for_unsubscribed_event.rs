struct Notifier;

#[evc::consumer("worker.notification.iu")]
impl Notifier {
    async fn on_iu_born(&self) {}
    async fn on_iu_edited(&self) {}
}

fn main() {}
